package ab

import "math"

// Judged is a judge model's tally over a sample of pairs, graded blind:
// the candidate's wins and losses against the primary, the ties, and the
// pairs the judge did not grade.
type Judged struct {
	Wins   int `json:"candidate_preferred"`
	Losses int `json:"primary_preferred"`
	Ties   int `json:"ties"`
	Failed int `json:"not_graded,omitempty"`
	// Preference is the candidate's share of the decided pairs, with its
	// 95% Wilson interval; 0.5 is no preference.
	Preference float64 `json:"preference"`
	Low        float64 `json:"preference_low"`
	High       float64 `json:"preference_high"`
}

// Settle computes the preference and its Wilson interval.
func (j *Judged) Settle() {
	n := float64(j.Wins + j.Losses)
	if n == 0 {
		j.Preference, j.Low, j.High = 0.5, 0, 1
		return
	}
	p := float64(j.Wins) / n
	const z = 1.96
	d := 1 + z*z/n
	c := (p + z*z/(2*n)) / d
	h := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / d
	j.Preference, j.Low, j.High = p, c-h, c+h
}
