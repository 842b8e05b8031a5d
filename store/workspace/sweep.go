package workspace

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// SweepViews unmounts and removes the run views a dead process left under
// stateDir (the Options.StateDir it opened its workspace with), without
// opening the workspace. The caller must own stateDir (its instance lock):
// views of a live process must never be swept.
func SweepViews(stateDir string, log *slog.Logger) error {
	runs := filepath.Join(stateDir, "runs")
	ents, err := os.ReadDir(runs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		dir := filepath.Join(runs, e.Name())
		m := &runMount{dir: dir, tmpfs: filepath.Join(dir, "changes"), merged: filepath.Join(dir, "merged")}
		log.Info("removing a leftover run view", "dir", dir)
		if err := m.release(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
