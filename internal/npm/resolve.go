package npm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/sandpit-dev/sandpit"
)

// Resolver defaults; each is a Resolver field.
const (
	DefaultMaxSpecs         = 200
	DefaultMaxPackages      = 500
	DefaultMaxDepth         = 50
	DefaultMaxSteps         = 2000
	DefaultMaxDownloadBytes = 1 << 30
	maxNotes                = 50
	maxListed               = 8 // versions or reasons a message lists
)

// Resolver turns specs into a Plan: a node_modules tree of verified-to-be
// tarballs. Zero fields take the defaults.
type Resolver struct {
	Client *Client

	MaxSpecs         int   // specs per call
	MaxPackages      int   // packages in the tree (a name twice at two versions counts twice)
	MaxDepth         int   // length of a dependency chain from a spec
	MaxSteps         int   // packument reads and version picks together
	MaxDownloadBytes int64 // packument bytes one Resolve reads
}

// Plan is the outcome of Resolve.
type Plan struct {
	// Packages sorted by Path, so a parent directory comes before what is
	// nested in it.
	Packages []Planned
	// Notes: deprecated versions, install scripts that will not run, peer
	// dependencies left to the caller, optional dependencies left out,
	// newer versions skipped because they were refused. At most 50, then
	// a count.
	Notes []string
}

// Planned is one package of a Plan: one tarball to unpack at Path.
type Planned struct {
	Name    string // "left-pad", "@scope/name"
	Version string // "1.3.0"
	// Path is where it unpacks, relative to the project: "node_modules/a",
	// or "node_modules/a/node_modules/b" when a needs another version of b
	// than the one above it.
	Path       string
	TarballURL string // on the registry's host or Client.AllowHosts
	Integrity  string // "sha512-<base64>", which FetchTarball verifies
	// Size is the unpacked size the registry states (dist.unpackedSize),
	// 0 when it states none.
	Size int64
	// RequiredBy: "request" and/or the "name@version" of each package
	// whose dependency this copy satisfies, sorted.
	RequiredBy []string
	// HasInstallScript: the package has install scripts (or a
	// binding.gyp), which never run here; it may not work without them.
	HasInstallScript bool
	Deprecated       string // the registry's deprecation message, "" when none
}

// TotalSize is the sum of the stated unpacked sizes.
func (p *Plan) TotalSize() int64 {
	var n int64
	for _, pk := range p.Packages {
		n += pk.Size
	}
	return n
}

func (r *Resolver) maxSpecs() int { return orDefault(r.MaxSpecs, DefaultMaxSpecs) }
func (r *Resolver) maxPkgs() int  { return orDefault(r.MaxPackages, DefaultMaxPackages) }
func (r *Resolver) maxDepth() int { return orDefault(r.MaxDepth, DefaultMaxDepth) }
func (r *Resolver) maxSteps() int { return orDefault(r.MaxSteps, DefaultMaxSteps) }
func (r *Resolver) maxDownload() int64 {
	return orDefault(r.MaxDownloadBytes, DefaultMaxDownloadBytes)
}

const byRequest = "request"

// tnode is a package placed in the tree (or the project, the root).
type tnode struct {
	name     string
	m        *Manifest
	parent   *tnode
	children map[string]*tnode
	path     string
	depth    int
	via      *tnode // the package whose dependency placed it (nil: the request)
	// edges: its dependencies resolved so far, name → the copy it reaches
	// and the range it asked; nil until it is processed.
	edges map[string]edge
	// optRoot is the package an optional dependency placed that n is part
	// of (n itself, or what required it); nil when n is required.
	optRoot *tnode
	// failed: a dependency of this optional package failed, so it is left
	// out of the plan with what only it required.
	failed error
}

type edge struct {
	to       *tnode
	rng      Range
	raw      string
	optional bool
}

func (n *tnode) id() string {
	if n.m == nil {
		return byRequest
	}
	return n.m.String()
}

// chain is "a@1.0.0 (required by b@2.0.0, required by the request)".
func (n *tnode) chain() string {
	var parts []string
	for m := n; m != nil && m.m != nil; m = m.via {
		parts = append(parts, m.id())
		if len(parts) > maxListed {
			parts = append(parts, "…")
			break
		}
	}
	return strings.Join(parts, " ← ") + " ← request"
}

// inside reports whether n is a or below it.
func (n *tnode) inside(a *tnode) bool {
	for m := n; m != nil; m = m.parent {
		if m == a {
			return true
		}
	}
	return false
}

type resolution struct {
	r          *Resolver
	root       *tnode
	count      int
	queue      []*tnode
	packuments map[string]*Packument
	steps      int
	downloaded int64
	notes      []string
	moreNotes  int
}

// Resolve places specs and every dependency they bring in a node_modules
// tree. Per edge it reuses the copy Node would find from the dependent
// when that copy satisfies the range; otherwise it picks the dist-tag
// latest when that satisfies the range (and is not deprecated), else the
// newest satisfying version that is not deprecated, else the newest
// deprecated one, and places it as high as it can: at the top when no
// other copy of that name is in the way and no package already placed
// below would see it instead of the copy it relies on, nested under the
// dependent otherwise. Dependencies are processed breadth first, names in
// order, so the plan depends only on the registry's answers.
func (r *Resolver) Resolve(ctx context.Context, specs []Spec) (*Plan, error) {
	if _, err := r.Client.base(); err != nil { // also a nil Client
		return nil, err
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%w: no packages named", ErrInvalidSpec)
	}
	if len(specs) > r.maxSpecs() {
		return nil, limitf("install them in several calls", "%d packages in one call, over the limit of %d", len(specs), r.maxSpecs())
	}
	byName := map[string][]Spec{}
	for _, s := range specs {
		if err := ValidName(s.Name); err != nil {
			return nil, err
		}
		byName[s.Name] = append(byName[s.Name], s)
	}
	s := &resolution{r: r, packuments: map[string]*Packument{}}
	s.root = &tnode{children: map[string]*tnode{}, edges: map[string]edge{}}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		ss := byName[name]
		var rs []Range
		for _, sp := range ss {
			rs = append(rs, sp.Range)
		}
		m, err := s.pick(ctx, name, rs, nil)
		if err != nil {
			return nil, err
		}
		n, err := s.place(s.root, s.root, name, m, false)
		if err != nil {
			return nil, err
		}
		s.root.edges[name] = edge{to: n, rng: ss[0].Range, raw: ss[0].Range.String()}
	}
	for len(s.queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := s.queue[0]
		s.queue = s.queue[1:]
		if err := s.process(ctx, n); err != nil {
			return nil, err
		}
	}
	return s.plan()
}

func (s *resolution) step() error {
	s.steps++
	if s.steps > s.r.maxSteps() {
		return limitf("pin versions, or install fewer packages at once", "resolving took over %d steps (packument reads and version picks)", s.r.maxSteps())
	}
	return nil
}

func (s *resolution) note(format string, a ...any) {
	if len(s.notes) >= maxNotes {
		s.moreNotes++
		return
	}
	s.notes = append(s.notes, fmt.Sprintf(format, a...))
}

func (s *resolution) packument(ctx context.Context, name string) (*Packument, error) {
	if p := s.packuments[name]; p != nil {
		return p, nil
	}
	if err := s.step(); err != nil {
		return nil, err
	}
	left := s.r.maxDownload() - s.downloaded
	if left <= 0 {
		return nil, limitf("pin fewer packages per call, or the operator raises the budget", "resolving would read over %d bytes of packuments", s.r.maxDownload())
	}
	cl := *s.r.Client
	cl.MaxPackumentBytes = min(cl.maxPackument(), left)
	p, n, err := cl.packument(ctx, name)
	s.downloaded += n
	if err != nil {
		if errors.Is(err, ErrTooLarge) && cl.MaxPackumentBytes < s.r.Client.maxPackument() {
			return nil, limitf("pin fewer packages per call, or the operator raises the budget", "resolving would read over %d bytes of packuments (at %s)", s.r.maxDownload(), name)
		}
		return nil, err
	}
	s.packuments[name] = p
	return p, nil
}

// process resolves n's dependencies, in name order: required ones, then
// optional ones (whose failures are notes).
func (s *resolution) process(ctx context.Context, n *tnode) error {
	n.edges = map[string]edge{}
	type dep struct {
		name, raw string
		optional  bool
	}
	var deps []dep
	for _, name := range slices.Sorted(maps.Keys(n.m.Dependencies)) {
		if _, opt := n.m.OptionalDependencies[name]; !opt { // npm: optional wins
			deps = append(deps, dep{name, n.m.Dependencies[name], false})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(n.m.OptionalDependencies)) {
		deps = append(deps, dep{name, n.m.OptionalDependencies[name], true})
	}
	for _, d := range deps {
		err := s.resolveEdge(ctx, n, d.name, d.raw, d.optional)
		if err == nil {
			continue
		}
		if !isClassed(err) || errors.Is(err, ErrTooLarge) || ctx.Err() != nil {
			return err
		}
		if d.optional {
			s.note("left out optional dependency %.100q of %s: %v", d.name, n.id(), err)
			continue
		}
		if o := n.optRoot; o != nil {
			// npm leaves out an optional dependency whose own
			// dependencies fail, and everything only it required.
			if o.failed == nil {
				o.failed = err
				s.note("left out optional dependency %s of %s: %v", o.id(), o.via.id(), err)
			}
			return nil
		}
		return err
	}
	return nil
}

// resolveEdge finds or places the copy of name that n gets for raw.
func (s *resolution) resolveEdge(ctx context.Context, n *tnode, name, raw string, optional bool) error {
	if err := ValidDepName(name); err != nil {
		return fmt.Errorf("%w: %s depends on %.100q, which is no valid package name; pin another version of %s", ErrRefused, n.chain(), name, n.m.Name)
	}
	if why := notRegistry(raw); why != "" {
		return fmt.Errorf("%w: %s depends on %s through %.200q, which is %s, not a registry version; pin another version of %s", ErrRefused, n.chain(), name, raw, why, n.m.Name)
	}
	rng, err := ParseRange(raw)
	if err != nil {
		return fmt.Errorf("%w: %s depends on %s@%.200q, which does not parse (%v); pin another version of %s", ErrRefused, n.chain(), name, raw, err, n.m.Name)
	}
	// What Node finds from n: the nearest node_modules/name up the tree.
	var blocked *tnode
	for a := n; a != nil; a = a.parent {
		if c := a.children[name]; c != nil {
			if s.satisfies(c, rng) {
				n.edges[name] = edge{to: c, rng: rng, raw: raw, optional: optional}
				return nil
			}
			blocked = a
			break
		}
	}
	m, err := s.pick(ctx, name, []Range{rng}, n)
	if err != nil {
		return err
	}
	// Candidates from the highest (below what blocks, or the root) down to
	// n itself.
	var levels []*tnode
	for a := n; a != nil && a != blocked; a = a.parent {
		levels = append(levels, a)
	}
	slices.Reverse(levels)
	for _, a := range levels {
		if s.canPlace(a, name, m) {
			c, err := s.place(a, n, name, m, optional)
			if err != nil {
				return err
			}
			n.edges[name] = edge{to: c, rng: rng, raw: raw, optional: optional}
			return nil
		}
	}
	return fmt.Errorf("internal: no place for %s under %s", m, n.path) // n itself always fits
}

// satisfies reports whether copy c serves range rng: for "latest", only
// the version the tag names does.
func (s *resolution) satisfies(c *tnode, rng Range) bool {
	if rng.Tag() != "" {
		return c.m.Version.String() == s.packuments[c.name].Latest
	}
	return rng.Contains(c.m.Version)
}

// canPlace reports whether m may go in a's node_modules: nothing of that
// name is there, and no package already resolved below a reaches a copy of
// that name above a that the new one, which it would see first, does not
// satisfy.
func (s *resolution) canPlace(a *tnode, name string, m *Manifest) bool {
	if a.children[name] != nil {
		return false
	}
	ok := true
	probe := &tnode{name: name, m: m}
	var walk func(d *tnode)
	walk = func(d *tnode) {
		if !ok {
			return
		}
		if e, has := d.edges[name]; has && !e.to.inside(a) && !s.satisfies(probe, e.rng) {
			// e.to above a: d would see the new copy instead.
			ok = false
			return
		}
		for _, c := range d.children {
			walk(c)
		}
	}
	walk(a)
	return ok
}

// place puts m in a's node_modules on behalf of n (through an optional
// dependency or not) and queues it.
func (s *resolution) place(a, n *tnode, name string, m *Manifest, optional bool) (*tnode, error) {
	depth := n.depth + 1
	if depth > s.r.maxDepth() {
		return nil, limitf("", "a dependency chain is deeper than %d (at %s, required by %s)", s.r.maxDepth(), m, n.chain())
	}
	if s.count >= s.r.maxPkgs() {
		return nil, limitf("install fewer packages at once", "the dependencies reach over %d packages (at %s, required by %s)", s.r.maxPkgs(), m, n.chain())
	}
	s.count++
	path := "node_modules/" + name
	if a.path != "" {
		path = a.path + "/" + path
	}
	c := &tnode{name: name, m: m, parent: a, children: map[string]*tnode{}, path: path, depth: depth}
	if n.m != nil {
		c.via = n
	}
	c.optRoot = n.optRoot
	if optional && c.optRoot == nil {
		c.optRoot = c
	}
	a.children[name] = c
	// Packages below a that reached an older copy above a now see this
	// one, which canPlace made sure satisfies them.
	var repoint func(d *tnode)
	repoint = func(d *tnode) {
		if e, has := d.edges[name]; has && !e.to.inside(a) {
			e.to = c
			d.edges[name] = e
		}
		for _, ch := range d.children {
			repoint(ch)
		}
	}
	repoint(a)
	s.queue = append(s.queue, c)
	return c, nil
}

// pick chooses the version of name for rs, all at once (n: the dependent,
// nil for the request).
func (s *resolution) pick(ctx context.Context, name string, rs []Range, n *tnode) (*Manifest, error) {
	p, err := s.packument(ctx, name)
	if err != nil {
		if n != nil && errors.Is(err, ErrNoPackage) {
			return nil, fmt.Errorf("%w (required by %s)", err, n.chain())
		}
		return nil, err
	}
	if err := s.step(); err != nil {
		return nil, err
	}
	fits := func(v *semver.Version) bool {
		for _, r := range rs {
			if r.Tag() != "" && v.String() != p.Latest || !r.Contains(v) {
				return false
			}
		}
		return true
	}
	all := make([]*Manifest, 0, len(p.Versions))
	for _, m := range p.Versions {
		all = append(all, m)
	}
	slices.SortFunc(all, func(a, b *Manifest) int { return b.Version.Compare(a.Version) })
	var cands, refused []*Manifest
	for _, m := range all {
		if !fits(m.Version) {
			continue
		}
		if m.Refused != "" {
			refused = append(refused, m)
			continue
		}
		cands = append(cands, m)
	}
	var chosen *Manifest
	if l := p.Versions[p.Latest]; l != nil && l.Refused == "" && l.Deprecated == "" && fits(l.Version) {
		chosen = l
	}
	for _, m := range cands {
		if chosen == nil && m.Deprecated == "" {
			chosen = m
		}
	}
	if chosen == nil && len(cands) > 0 {
		chosen = cands[0] // all deprecated: the newest
	}
	if chosen == nil {
		return nil, s.noVersion(p, all, refused, rs, n)
	}
	for _, m := range refused {
		if m.Version.GreaterThan(chosen.Version) {
			s.note("%s: skipped %s: %s", name, m.Version, m.Refused)
		}
	}
	return chosen, nil
}

// noVersion explains why no version of p satisfies rs.
func (s *resolution) noVersion(p *Packument, all, refused []*Manifest, rs []Range, n *tnode) error {
	if len(refused) > 0 {
		m := refused[0]
		return sandpit.Hintf(fmt.Errorf("%w: %s: %s", ErrRefused, m, m.Refused), "pin another version of %s", rootName(p.Name, n))
	}
	var asked []string
	for _, r := range rs {
		asked = append(asked, p.Name+"@"+r.String())
	}
	slices.Sort(asked)
	asked = slices.Compact(asked)
	avail := versionsText(all)
	if len(all) == 0 {
		avail = "none"
	}
	if n != nil {
		return sandpit.Hintf(fmt.Errorf("%w: no version of %s satisfies %s, which %s requires; available: %s", ErrConflict, p.Name, strings.Join(asked, " and "), n.chain(), avail),
			"pin another version of %s, one whose dependencies the registry can satisfy", rootName(p.Name, n))
	}
	if len(rs) > 1 {
		alone := true
		for _, r := range rs {
			ok := false
			for _, m := range all {
				if r.Tag() != "" && m.Version.String() == p.Latest || r.Tag() == "" && r.Contains(m.Version) {
					ok = true
				}
			}
			alone = alone && ok
		}
		if alone {
			return sandpit.Hintf(fmt.Errorf("%w: no version of %s satisfies them all: %s (requested); available: %s", ErrConflict, p.Name, strings.Join(asked, ", "), avail),
				"ask for %s once, with one range", p.Name)
		}
	}
	if rs[0].Tag() != "" && p.Latest == "" {
		return fmt.Errorf("%w: %s has no latest dist-tag; name a version (available: %s)", ErrNoMatch, p.Name, avail)
	}
	return sandpit.Hintf(fmt.Errorf("%w: no version of %s matches %s; available: %s", ErrNoMatch, p.Name, strings.Join(asked, ", "), avail),
		"ask for one of the available versions")
}

// rootName is the requested package a dependency came from.
func rootName(name string, n *tnode) string {
	for m := n; m != nil && m.m != nil; m = m.via {
		name = m.m.Name
	}
	return name
}

func versionsText(ms []*Manifest) string {
	parts := make([]string, 0, min(len(ms), maxListed))
	for _, m := range ms[:min(len(ms), maxListed)] {
		parts = append(parts, m.Version.String())
	}
	s := strings.Join(parts, ", ")
	if len(ms) > maxListed {
		s += fmt.Sprintf(" and %d older", len(ms)-maxListed)
	}
	return s
}

// plan lists the copies the request reaches, sorted by path, with who
// requires each and the notes on what will not happen. Optional packages
// that failed are left out, with what only they required; a required
// dependency on one of them is its failure.
func (s *resolution) plan() (*Plan, error) {
	reach := map[*tnode]bool{s.root: true}
	walk := []*tnode{s.root}
	var nodes []*tnode
	by := map[*tnode][]string{}
	for len(walk) > 0 {
		n := walk[0]
		walk = walk[1:]
		for _, name := range slices.Sorted(maps.Keys(n.edges)) {
			e := n.edges[name]
			if e.to.failed != nil {
				if !e.optional {
					return nil, e.to.failed
				}
				continue
			}
			by[e.to] = append(by[e.to], n.id())
			if !reach[e.to] {
				reach[e.to] = true
				nodes = append(nodes, e.to)
				walk = append(walk, e.to)
			}
		}
	}
	slices.SortFunc(nodes, func(a, b *tnode) int { return strings.Compare(a.path, b.path) })
	for _, n := range nodes {
		m := n.m
		if m.Deprecated != "" {
			s.note("%s is deprecated: %.200q", m, m.Deprecated)
		}
		if m.HasInstallScript {
			s.note("%s has install scripts; they do not run here, and it may not work without them", m)
		}
		for _, peer := range slices.Sorted(maps.Keys(m.PeerDependencies)) {
			raw := m.PeerDependencies[peer]
			rng, err := ParseRange(raw)
			found := false
			for a := n; a != nil && !found; a = a.parent {
				if c := a.children[peer]; c != nil {
					found = err == nil && rng.Tag() == "" && rng.Contains(c.m.Version)
					break
				}
			}
			if !found {
				s.note("%s expects a peer dependency %.100q@%.100q; install it too if the code needs it", m, peer, raw)
			}
		}
	}
	p := &Plan{Notes: s.notes}
	if s.moreNotes > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("and %d more notes", s.moreNotes))
	}
	for _, n := range nodes {
		rb := by[n]
		slices.Sort(rb)
		p.Packages = append(p.Packages, Planned{
			Name:             n.name,
			Version:          n.m.Version.String(),
			Path:             n.path,
			TarballURL:       n.m.Tarball,
			Integrity:        n.m.Integrity,
			Size:             n.m.UnpackedSize,
			RequiredBy:       slices.Compact(rb),
			HasInstallScript: n.m.HasInstallScript,
			Deprecated:       n.m.Deprecated,
		})
	}
	return p, nil
}
