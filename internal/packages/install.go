package packages

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/npm"
	"github.com/sandpit-dev/sandpit/internal/pypi"
)

// Op is what install_packages or remove_packages asks of a workspace.
type Op struct {
	Language string
	Add      []string // requirement strings (pip) or specs (npm)
	Remove   []string // names
}

// Install is a planned change of the layer. Its Request, when not nil, is
// the install step: the caller runs it as the agent's run (recorded, with
// the workspace attached, so the lock it writes is undoable), then calls
// Commit; Close always.
type Install struct {
	Request   *sandpit.Request
	Installed []Package // new or at another version than before
	Removed   []Package
	Unchanged []Package
	Refused   []Refusal
	Notes     []string
	Lock      *Lock // the lock after the change

	m    *Manager
	b    *build
	done bool
}

// Close releases the workspace's install turn and what an uncommitted
// build left.
func (in *Install) Close() {
	if in.done {
		return
	}
	in.done = true
	if in.b != nil {
		in.b.cleanup()
	}
	in.m.give()
}

// Commit checks the install step's work and makes its layer current.
func (in *Install) Commit(res *sandpit.Result) error {
	if in.b == nil {
		return nil
	}
	return in.m.commit(in.b, res)
}

// Plan resolves op against the workspace's lock (read by readLock once
// this workspace's turn came: ENOENT is no lock) and prepares the install
// step. Requirement strings that are refused on their own (a URL, a path,
// a bad name) are listed in Refused and the rest go ahead; anything that
// makes the whole set impossible (a conflict, the policy refusing a
// dependency, a bound) is an error and changes nothing.
func (m *Manager) Plan(ctx context.Context, op Op, readLock func(context.Context) ([]byte, error)) (_ *Install, err error) {
	if op.Language != Python && op.Language != JavaScript {
		return nil, fmt.Errorf("%w: language %q: give python or javascript", sandpit.ErrInvalidArgument, op.Language)
	}
	if !m.Configured(op.Language) {
		return nil, m.notConfigured(op.Language)
	}
	if n := len(op.Add) + len(op.Remove); n == 0 {
		return nil, fmt.Errorf("%w: no packages named", sandpit.ErrInvalidArgument)
	} else if n > m.cfg.MaxSpecs {
		return nil, sandpit.WithHint(fmt.Errorf("%w: %d packages in one call, over the limit of %d", ErrTooLarge, n, m.cfg.MaxSpecs), "name fewer at once: dependencies are resolved for you")
	}
	if err := m.take(ctx); err != nil {
		return nil, err
	}
	in := &Install{m: m}
	defer func() {
		if err != nil {
			in.Close()
		}
	}()
	text, err := readLock(ctx)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read %s: %w", LockFile, err)
	}
	old, err := ParseLockOrEmpty(text)
	if err != nil {
		return nil, err
	}
	next := &Lock{Version: LockVersion, Requested: Requested{Python: slices.Clone(old.Requested.Python), JavaScript: slices.Clone(old.Requested.JavaScript)}, Python: old.Python, JavaScript: old.JavaScript}
	have := map[string]string{} // sha256 → path, fetched here
	switch op.Language {
	case Python:
		if err := m.planPython(ctx, in, next, op, have); err != nil {
			return nil, err
		}
	case JavaScript:
		if err := m.planJS(ctx, in, next, op, have); err != nil {
			return nil, err
		}
	}
	in.Lock = next
	in.diff(old, next)
	if next.Digest() == old.Digest() && slices.Equal(next.Requested.Python, old.Requested.Python) && slices.Equal(next.Requested.JavaScript, old.Requested.JavaScript) {
		return in, nil // nothing changes: no step to run
	}
	lockText := ""
	if !next.Empty() || len(next.Requested.Python)+len(next.Requested.JavaScript) > 0 {
		lockText = string(next.Marshal())
	}
	in.b, err = m.prepare(ctx, next, have)
	if err != nil {
		return nil, err
	}
	req := in.b.request(&lockText)
	in.Request = &req
	return in, nil
}

// ParseLockOrEmpty is ParseLock, with no text an empty lock.
func ParseLockOrEmpty(text []byte) (*Lock, error) {
	if len(text) == 0 {
		return &Lock{Version: LockVersion}, nil
	}
	return ParseLock(text)
}

func (m *Manager) planPython(ctx context.Context, in *Install, next *Lock, op Op, have map[string]string) error {
	byName := map[string]string{}
	for _, r := range next.Requested.Python {
		if q, err := pypi.ParseRequirement(r); err == nil {
			byName[q.Name] = r
		}
	}
	for _, name := range op.Remove {
		n := pypi.Normalize(name)
		if _, ok := byName[n]; !ok {
			in.Refused = append(in.Refused, Refusal{Spec: name, Reason: "not installed by request (list_packages shows what is; a dependency goes when nothing requested needs it)"})
			continue
		}
		delete(byName, n)
	}
	added := 0
	for _, s := range op.Add {
		q, err := pypi.ParseRequirement(s)
		if err != nil {
			in.Refused = append(in.Refused, Refusal{Spec: s, Reason: reason(err)})
			continue
		}
		byName[q.Name] = q.String()
		added++
	}
	if len(op.Add) > 0 && added == 0 {
		return fmt.Errorf("%w: nothing to install: %s", ErrRefused, refusalText(in.Refused))
	}
	var reqs []pypi.Requirement
	next.Requested.Python = nil
	for _, r := range byName {
		q, _ := pypi.ParseRequirement(r)
		reqs = append(reqs, q)
		next.Requested.Python = append(next.Requested.Python, r)
	}
	slices.Sort(next.Requested.Python)
	slices.SortFunc(reqs, func(a, b pypi.Requirement) int { return cmpString(a.Name, b.Name) })
	next.Python = nil
	if len(reqs) == 0 {
		return nil
	}
	src := m.cfg.Python
	res := &pypi.Resolver{Client: src.Client, Cache: m.cfg.Cache, MaxPackages: DefaultMaxLayerPackages}
	plan, err := res.Resolve(ctx, reqs, src.Target)
	if err != nil {
		return err
	}
	in.Notes = append(in.Notes, plan.Notes...)
	var refused []string
	for _, p := range plan.Packages {
		if why := m.cfg.Policy.Check(Python, p.Name, p.Version.String()); why != "" {
			refused = append(refused, why)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: %s; nothing was installed", ErrRefused, names(refused))
	}
	for _, p := range plan.Packages {
		path, err := m.cfg.Cache.Fetch(ctx, src.Client, p.File)
		if err != nil {
			return err
		}
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		have[p.File.SHA256] = path
		next.Python = append(next.Python, PyEntry{Name: p.Name, Version: p.Version.String(), Filename: p.File.Filename, URL: p.File.URL, SHA256: p.File.SHA256, Size: info.Size()})
	}
	next.sort()
	return nil
}

func (m *Manager) planJS(ctx context.Context, in *Install, next *Lock, op Op, have map[string]string) error {
	byName := map[string]string{}
	for _, r := range next.Requested.JavaScript {
		if s, err := npm.ParseSpec(r); err == nil {
			byName[s.Name] = r
		}
	}
	for _, name := range op.Remove {
		if _, ok := byName[name]; !ok {
			in.Refused = append(in.Refused, Refusal{Spec: name, Reason: "not installed by request (list_packages shows what is; a dependency goes when nothing requested needs it)"})
			continue
		}
		delete(byName, name)
	}
	added := 0
	for _, s := range op.Add {
		sp, err := npm.ParseSpec(s)
		if err != nil {
			in.Refused = append(in.Refused, Refusal{Spec: s, Reason: reason(err)})
			continue
		}
		byName[sp.Name] = sp.Raw
		added++
	}
	if len(op.Add) > 0 && added == 0 {
		return fmt.Errorf("%w: nothing to install: %s", ErrRefused, refusalText(in.Refused))
	}
	var specs []npm.Spec
	next.Requested.JavaScript = nil
	for _, r := range byName {
		sp, _ := npm.ParseSpec(r)
		specs = append(specs, sp)
		next.Requested.JavaScript = append(next.Requested.JavaScript, r)
	}
	slices.Sort(next.Requested.JavaScript)
	slices.SortFunc(specs, func(a, b npm.Spec) int { return cmpString(a.Name, b.Name) })
	next.JavaScript = nil
	if len(specs) == 0 {
		return nil
	}
	res := &npm.Resolver{Client: m.cfg.JavaScript, MaxPackages: DefaultMaxLayerPackages}
	plan, err := res.Resolve(ctx, specs)
	if err != nil {
		return err
	}
	in.Notes = append(in.Notes, plan.Notes...)
	var refused []string
	for _, p := range plan.Packages {
		if why := m.cfg.Policy.Check(JavaScript, p.Name, p.Version); why != "" {
			refused = append(refused, why)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: %s; nothing was installed", ErrRefused, names(refused))
	}
	for _, p := range plan.Packages {
		path, sum, err := npm.FetchTarball(ctx, m.cfg.JavaScript, m.cfg.Cache.Cache, p)
		if err != nil {
			return err
		}
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		have[sum] = path
		next.JavaScript = append(next.JavaScript, JSEntry{Name: p.Name, Version: p.Version, Path: p.Path, URL: p.TarballURL, Integrity: p.Integrity, SHA256: sum, Size: info.Size()})
	}
	next.sort()
	return nil
}

// diff fills Installed, Removed and Unchanged.
func (in *Install) diff(old, next *Lock) {
	key := func(p Package) string { return p.Language + " " + p.Path + " " + p.Name }
	before := map[string]Package{}
	for _, p := range old.Packages() {
		before[key(p)] = p
	}
	for _, p := range next.Packages() {
		b, ok := before[key(p)]
		delete(before, key(p))
		if ok && b.SHA256 == p.SHA256 {
			in.Unchanged = append(in.Unchanged, p)
		} else {
			in.Installed = append(in.Installed, p)
		}
	}
	for _, p := range old.Packages() {
		if _, ok := before[key(p)]; ok {
			in.Removed = append(in.Removed, p)
		}
	}
}

func reason(err error) string {
	if h := sandpit.HintOf(err); h != "" {
		return err.Error() + "; " + h
	}
	return err.Error()
}

func refusalText(rs []Refusal) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%q: %s", r.Spec, r.Reason))
	}
	return names(out)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
