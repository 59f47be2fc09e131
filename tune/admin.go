package tune

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
)

// admin is the gateway's admin listener: its configuration history, a
// change of settings, a rollback.
type admin struct{ c *adminapi.Client }

// Version is one of the gateway's kept configurations, as
// /admin/config/versions lists it.
type Version struct {
	Version  int               `json:"version"`
	Hash     string            `json:"hash"`
	Source   string            `json:"source"`
	Current  bool              `json:"current"`
	Settings map[string]string `json:"settings"`
}

func (a *admin) do(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.c.Do(ctx, method, path, body, out); err != nil {
		return fmt.Errorf("tune: gateway admin: %w", err)
	}
	return nil
}

// current is the configuration the gateway runs now.
func (a *admin) current(ctx context.Context) (Version, error) {
	var vs struct {
		Versions []Version `json:"versions"`
	}
	if err := a.do(ctx, http.MethodGet, "/admin/config/versions", nil, &vs); err != nil {
		return Version{}, err
	}
	for _, v := range vs.Versions {
		if v.Current {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("tune: the gateway at %s names no current configuration", a.c.URL)
}

// set changes settings on the running gateway.
func (a *admin) set(ctx context.Context, settings map[string]string, source string) (Version, error) {
	var v Version
	err := a.do(ctx, http.MethodPost, "/admin/config/set", map[string]any{"settings": settings, "source": source}, &v)
	return v, err
}

// restore applies the kept configuration with this hash again.
func (a *admin) restore(ctx context.Context, hash string) (Version, error) {
	var v Version
	err := a.do(ctx, http.MethodPost, "/admin/config/rollback", map[string]any{"hash": hash}, &v)
	return v, err
}
