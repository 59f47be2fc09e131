package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/proxy"
)

const configSynopsis = `config versions|rollback|reload|check [flags]

  config versions --admin ADMIN_URL
      the configurations a running gateway keeps (the last 32 applied),
      newest first: version, hash, when, where from (start, SIGHUP,
      rollback), and what changed from the one before.
  config rollback --admin ADMIN_URL [--to VERSION | --hash PREFIX]
      applies a kept configuration again (default: the one before the
      current). It is validated like a reload; a refused one changes
      nothing. The file on disk is not touched: a later SIGHUP reads it.
  config reload --admin ADMIN_URL
      makes the gateway re-read its --config file, as SIGHUP does; a file
      that does not validate is refused and the running one stays.
  config check FILE
      validates a configuration file as serve would, without serving.`

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs := newFlagSet("config", configSynopsis, stderr)
		if err := fs.Parse(args); err != nil {
			return err
		}
		fs.Usage()
		return errors.New("config: name a subcommand: versions, rollback, reload or check")
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("config "+sub, configSynopsis, stderr)
	gateway := fs.String("admin", "http://"+proxy.DefaultAdminListen, "the gateway's admin listener (serve --admin-listen)")
	adminKey := fs.String("admin-key", "", "the gateway's server.admin_auth key, when it has one")
	to := fs.Int("to", 0, "rollback: the version to apply again")
	hash := fs.String("hash", "", "rollback: the hash (or a prefix) of the configuration to apply again")
	if err := fs.Parse(args); err != nil {
		return err
	}
	base := strings.TrimSuffix(withScheme(*gateway), "/")
	admin := &adminapi.Client{URL: base, Key: *adminKey, HTTP: safehttp.Client(30 * time.Second)}
	switch sub {
	case "versions":
		vs, err := admin.Versions(ctx)
		if err != nil {
			return fmt.Errorf("config versions: %w", err)
		}
		for i, v := range vs.Versions {
			cur := ""
			if v.Current {
				cur = "  (current)"
			}
			fmt.Fprintf(stdout, "version %d  %s  %s  %s%s\n", v.Version, v.Hash, v.AppliedAt.Local().Format(time.DateTime), v.Source, cur)
			if i+1 < len(vs.Versions) {
				for _, d := range bench.SettingsDiff(vs.Versions[i+1].Settings, v.Settings) {
					fmt.Fprintf(stdout, "    %s\n", d)
				}
			}
		}
		return nil
	case "rollback":
		if *to > 0 && *hash != "" {
			return errors.New("config rollback: give --to or --hash, not both")
		}
		// Neither: the previous configuration.
		v, err := admin.Rollback(ctx, adminapi.RollbackRequest{Version: *to, Hash: *hash})
		if err != nil {
			return fmt.Errorf("config rollback: %w", err)
		}
		fmt.Fprintf(stdout, "rolled back: now version %d (%s), %s\n", v.Version, v.Hash, v.Source)
		return nil
	case "reload":
		v, err := admin.Reload(ctx)
		if err != nil {
			return fmt.Errorf("config reload: %w", err)
		}
		fmt.Fprintf(stdout, "reloaded: now version %d (%s), %s\n", v.Version, v.Hash, v.Source)
		return nil
	case "check":
		if fs.NArg() != 1 {
			return errors.New("config check: name one file")
		}
		cfg, err := loadConfig(fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: valid (%d pools, %d settings)\n", fs.Arg(0), len(cfg.Pools), len(proxy.Settings(cfg)))
		return nil
	}
	return fmt.Errorf("config: unknown subcommand %q (versions, rollback, reload, check)", sub)
}
