package tune

import (
	"context"
	"fmt"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
)

// admin is the gateway's admin listener: its configuration history, a
// change of settings, a rollback. Each call gets 10 s.
type admin struct{ c *adminapi.Client }

// current is the configuration the gateway runs now.
func (a *admin) current(ctx context.Context) (adminapi.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	vs, err := a.c.Versions(ctx)
	if err != nil {
		return adminapi.Version{}, fmt.Errorf("tune: gateway admin: %w", err)
	}
	v, ok := vs.Find("")
	if !ok {
		return adminapi.Version{}, fmt.Errorf("tune: the gateway at %s names no current configuration", a.c.URL)
	}
	return v, nil
}

// set changes settings on the running gateway.
func (a *admin) set(ctx context.Context, settings map[string]string, source string) (adminapi.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := a.c.Set(ctx, adminapi.SetRequest{Settings: settings, Source: source})
	if err != nil {
		return v, fmt.Errorf("tune: gateway admin: %w", err)
	}
	return v, nil
}

// restore applies the kept configuration with this hash again.
func (a *admin) restore(ctx context.Context, hash string) (adminapi.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := a.c.Rollback(ctx, adminapi.RollbackRequest{Hash: hash})
	if err != nil {
		return v, fmt.Errorf("tune: gateway admin: %w", err)
	}
	return v, nil
}
