package runtime

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// Health reports whether containerd answers and which images are ready. It
// dials when needed and never waits longer than the dial timeout.
func (r *Runtime) Health(ctx context.Context) sandpit.HealthReport {
	rep := sandpit.HealthReport{
		ContainerdAddress: r.cfg.Address,
		Namespace:         r.cfg.Namespace,
		Runtime:           filepath.Base(r.cfg.RuncBinary),
		UserNamespace:     r.cfg.UserNS != nil,
	}
	if v, err := r.eng.Ping(ctx); err != nil {
		rep.Error = err.Error()
	} else {
		rep.Reachable = true
		rep.ContainerdVersion = v
	}
	seen := map[string]bool{}
	versions := r.imageVersions()
	for _, l := range r.cfg.Languages {
		if seen[l.Image] {
			continue
		}
		seen[l.Image] = true
		st := sandpit.ImageStatus{Ref: l.Image}
		if labels, ok := versions[l.Image]; ok {
			st.Present = true
			st.Versions = map[string]string{}
			for k, v := range labels {
				if name, ok := strings.CutPrefix(k, "org.sandpit.version."); ok {
					st.Versions[name] = v
				}
			}
		}
		rep.Images = append(rep.Images, st)
	}
	return rep
}
