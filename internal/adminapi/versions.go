package adminapi

import "time"

// Version is one configuration the gateway applied: an entry of GET
// /admin/config/versions, and the answer of a set or a rollback.
type Version struct {
	// Version counts applications from 1 at start; a rollback is a new
	// version with the old settings.
	Version   int       `json:"version"`
	Hash      string    `json:"hash"`
	AppliedAt time.Time `json:"applied_at"`
	// Source says where it came from: "start", "reload", "sighup FILE",
	// "rollback to version N", "set: WHY".
	Source  string `json:"source"`
	Current bool   `json:"current"`
	// Settings are the configuration's non-zero fields by their YAML
	// paths ("shaping.global.max_requests": "24"), secrets left out.
	Settings map[string]string `json:"settings"`
}

// Versions is what GET /admin/config/versions answers: the kept
// configurations (the last 32 applied), newest first, the current one
// marked.
type Versions struct {
	Versions []Version `json:"versions"`
}

// Find returns the kept configuration whose hash is hash, or the current
// one when hash is empty; ok is false when there is none.
func (vs Versions) Find(hash string) (v Version, ok bool) {
	for _, v := range vs.Versions {
		if hash == "" && v.Current || hash != "" && v.Hash == hash {
			return v, true
		}
	}
	return Version{}, false
}

// SetRequest is the body of POST /admin/config/set: settings by their
// YAML paths, as Version.Settings names them, applied on top of the
// running configuration as one reload; Source says why (the history
// keeps it as "set: " + Source).
type SetRequest struct {
	Settings map[string]string `json:"settings"`
	Source   string            `json:"source"`
}

// RollbackRequest is the body of POST /admin/config/rollback: the kept
// configuration numbered Version, or the one whose hash starts with Hash;
// with neither, the one before the current.
type RollbackRequest struct {
	Version int    `json:"version,omitempty"`
	Hash    string `json:"hash,omitempty"`
}
