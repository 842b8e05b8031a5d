package pypi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// Resolver defaults; each is a Resolver field.
const (
	DefaultMaxRequirements  = 200
	DefaultMaxPackages      = 500
	DefaultMaxDepth         = 50
	DefaultMaxSteps         = 2000
	DefaultMaxDownloadBytes = 1 << 30
	maxNotes                = 50
	maxListed               = 8 // versions or reasons a message lists
)

// Resolver turns requirements into a Plan of wheels for a Target. Zero
// fields take the defaults.
type Resolver struct {
	Client *Client
	// Cache receives the wheels Resolve downloads to read their METADATA
	// (when the index offers no PEP 658 metadata); nil downloads them to
	// temporary files and removes them.
	Cache *Cache

	MaxRequirements  int   // requirements per call
	MaxPackages      int   // distinct packages considered
	MaxDepth         int   // length of a dependency chain
	MaxSteps         int   // picks, re-picks and metadata reads together
	MaxDownloadBytes int64 // bytes Resolve itself downloads (metadata, wheels without it)
}

// Plan is the outcome of Resolve: the wheels to install, in the order
// they were first required (breadth first).
type Plan struct {
	Packages []Planned
	// Notes: dependencies left out because their marker could not be
	// evaluated for the target, extras a package does not provide. At
	// most 50, then a count.
	Notes []string
}

// Planned is one package of a Plan.
type Planned struct {
	Name       string // normalized
	Version    Version
	File       File     // the chosen wheel: Filename, URL, SHA256, Size
	Extras     []string // extras asked of it
	RequiredBy []string // "request" or "name version"
	// Path is the verified wheel in the Cache when Resolve downloaded it
	// (it had no PEP 658 metadata), else "".
	Path string
	// Size is the wheel's size when known (the index said, or Resolve
	// downloaded it), else 0.
	Size int64
}

// TotalSize is the sum of the known sizes.
func (p *Plan) TotalSize() int64 {
	var n int64
	for _, pk := range p.Packages {
		n += pk.Size
	}
	return n
}

func (r *Resolver) maxReqs() int  { return orDefault(r.MaxRequirements, DefaultMaxRequirements) }
func (r *Resolver) maxPkgs() int  { return orDefault(r.MaxPackages, DefaultMaxPackages) }
func (r *Resolver) maxDepth() int { return orDefault(r.MaxDepth, DefaultMaxDepth) }
func (r *Resolver) maxSteps() int { return orDefault(r.MaxSteps, DefaultMaxSteps) }
func (r *Resolver) maxDownload() int64 {
	return orDefault(r.MaxDownloadBytes, DefaultMaxDownloadBytes)
}

const byRequest = "request"

type constraint struct {
	req    Requirement
	by     string // byRequest or "name version"
	byName string // "" for the request
}

func (c constraint) String() string {
	s := c.req.Name + c.req.Specifiers.String()
	if c.by == byRequest {
		return s + " (requested)"
	}
	return s + " (from " + c.by + ")"
}

type pick struct {
	file    File
	meta    Metadata
	deps    []Requirement
	extras  []string // the extras deps were computed for
	path    string
	size    int64
	version Version
}

type node struct {
	name   string
	order  int
	depth  int
	cons   []constraint
	files  []File
	loaded bool
	pick   *pick
	queued bool
	// rejected: wheels whose METADATA excluded them after the index's
	// listing did not (Requires-Python), with the reason.
	rejected map[string]string
}

func (n *node) specs() Specifiers {
	var ss Specifiers
	for _, c := range n.cons {
		ss = append(ss, c.req.Specifiers...)
	}
	return ss
}

func (n *node) extras() []string {
	var xs []string
	for _, c := range n.cons {
		xs = append(xs, c.req.Extras...)
	}
	slices.Sort(xs)
	return slices.Compact(xs)
}

type resolution struct {
	r          *Resolver
	t          *Target
	nodes      map[string]*node
	queue      []*node
	steps      int
	downloaded int64
	notes      []string
	moreNotes  int
}

// Resolve picks, for reqs and every dependency they bring, the newest
// wheel for t that is not yanked (unless pinned with ==), fits t's tags
// and Python version and satisfies every constraint on its name. See the
// package comment for what it does not try.
func (r *Resolver) Resolve(ctx context.Context, reqs []Requirement, t Target) (*Plan, error) {
	if _, err := r.Client.base(); err != nil { // also a nil Client
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no packages named", ErrInvalidRequirement)
	}
	if len(reqs) > r.maxReqs() {
		return nil, limitf("install them in several calls", "%d packages in one call, over the limit of %d", len(reqs), r.maxReqs())
	}
	if !t.Python.IsValid() || len(t.Tags) == 0 {
		return nil, sandpit.Newf(sandpit.ErrInvalidArgument, "the target has no Python version or no tags")
	}
	s := &resolution{r: r, t: &t, nodes: map[string]*node{}}
	for _, req := range reqs {
		if err := ValidName(req.Name); err != nil {
			return nil, err
		}
		if req.Marker != nil {
			return nil, fmt.Errorf("%w: %s has an environment marker; name only the packages this environment needs", ErrInvalidRequirement, req.Name)
		}
		req.Name = Normalize(req.Name)
		for i, x := range req.Extras {
			req.Extras[i] = Normalize(x)
		}
		if err := s.add(req, nil); err != nil {
			return nil, err
		}
	}
	for len(s.queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := s.queue[0]
		s.queue = s.queue[1:]
		n.queued = false
		if err := s.settle(ctx, n); err != nil {
			return nil, err
		}
	}
	return s.plan(), nil
}

func (s *resolution) step() error {
	s.steps++
	if s.steps > s.r.maxSteps() {
		return limitf("pin versions to narrow the search", "resolving took over %d steps (picks, re-picks and metadata reads)", s.r.maxSteps())
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

func (s *resolution) enqueue(n *node) {
	if !n.queued {
		n.queued = true
		s.queue = append(s.queue, n)
	}
}

// add records a constraint on req.Name from parent (nil: the request).
func (s *resolution) add(req Requirement, parent *node) error {
	c := constraint{req: req, by: byRequest}
	depth := 1
	if parent != nil {
		c.by = parent.name + " " + parent.pick.version.String()
		c.byName = parent.name
		depth = parent.depth + 1
	}
	n := s.nodes[req.Name]
	if n == nil {
		if len(s.nodes) >= s.r.maxPkgs() {
			return limitf("install fewer packages at once", "the dependencies reach over %d packages (at %s, required by %s)", s.r.maxPkgs(), req.Name, c.by)
		}
		if depth > s.r.maxDepth() {
			return limitf("", "a dependency chain is deeper than %d (at %s, required by %s)", s.r.maxDepth(), req.Name, c.by)
		}
		n = &node{name: req.Name, order: len(s.nodes), depth: depth}
		s.nodes[req.Name] = n
	}
	n.depth = min(n.depth, depth)
	n.cons = append(n.cons, c)
	s.enqueue(n)
	return nil
}

// drop removes the constraints n's pick imposed, and then the picks of
// packages nothing else requires any more.
func (s *resolution) drop(n *node) {
	for _, m := range s.nodes {
		kept := m.cons[:0]
		removed := false
		for _, c := range m.cons {
			if c.byName == n.name {
				removed = true
				continue
			}
			kept = append(kept, c)
		}
		m.cons = kept
		if removed && m != n && m.pick != nil && !slices.ContainsFunc(m.cons, func(c constraint) bool { return c.byName != m.name }) {
			s.drop(m)
			m.pick = nil
			m.cons = nil
		}
	}
}

// settle makes n's pick satisfy its constraints and extras.
func (s *resolution) settle(ctx context.Context, n *node) error {
	if len(n.cons) == 0 {
		return nil // orphaned since it was queued
	}
	specs := n.specs()
	extras := n.extras()
	if n.pick != nil && specs.Contains(n.pick.version) {
		if !slices.Equal(extras, n.pick.extras) {
			return s.setDeps(n)
		}
		return nil
	}
	p, err := s.choose(ctx, n, specs)
	if err != nil {
		return err
	}
	if n.pick != nil {
		s.drop(n)
	}
	n.pick = p
	return s.setDeps(n)
}

func (s *resolution) setDeps(n *node) error {
	// Extras first: n may ask extras of itself (pkg[all] requiring
	// pkg[a]), and those constraints go with the drop.
	extras := n.extras()
	s.drop(n)
	deps, skipped, err := n.pick.meta.Dependencies(extras, s.t.Env)
	if err != nil {
		return err
	}
	for _, sk := range skipped {
		s.note("left out %s", sk)
	}
	for _, x := range extras {
		if !slices.Contains(n.pick.meta.ProvidesExtra, x) {
			s.note("%s %s provides no extra %q", n.name, n.pick.version, x)
		}
	}
	n.pick.deps = deps
	n.pick.extras = extras
	for _, d := range deps {
		if err := s.add(d, n); err != nil {
			return err
		}
	}
	return nil
}

// versionFiles are the usable files of one version.
type versionFiles struct {
	version Version
	files   []File
}

func (s *resolution) load(ctx context.Context, n *node) error {
	if n.loaded {
		return nil
	}
	files, err := s.r.Client.Files(ctx, n.name)
	if err != nil {
		if errors.Is(err, ErrNoProject) && len(n.cons) > 0 && n.cons[0].by != byRequest {
			return fmt.Errorf("%w (required by %s)", err, n.cons[0].by)
		}
		return err
	}
	n.files, n.loaded = files, true
	return nil
}

// choose picks the newest acceptable wheel for n under specs.
func (s *resolution) choose(ctx context.Context, n *node, specs Specifiers) (*pick, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	if err := s.load(ctx, n); err != nil {
		return nil, err
	}
	byVersion := map[string]*versionFiles{}
	var refused []File
	for _, f := range n.files {
		if f.Refused != "" {
			refused = append(refused, f)
			continue
		}
		k := f.Version.String()
		if byVersion[k] == nil {
			byVersion[k] = &versionFiles{version: f.Version}
		}
		byVersion[k].files = append(byVersion[k].files, f)
	}
	var all []Version
	for _, vf := range byVersion {
		all = append(all, vf.version)
	}
	slices.SortFunc(all, func(a, b Version) int { return b.Compare(a) })
	ok := specs.Filter(all)
	if len(ok) == 0 {
		return nil, s.noVersion(n, all, refused, specs)
	}
	pinned := specs.isPin()
	var reasons []string
	var sdist *SdistError
	for _, v := range ok {
		files := byVersion[v.String()].files
		for {
			best, why, sd := s.bestWheel(n, files, pinned)
			if best == nil {
				if sd != nil && sdist == nil && len(reasons) == 0 {
					sdist = sd
				}
				reasons = append(reasons, fmt.Sprintf("%s %s: %s", n.name, v, why))
				break
			}
			p, why, err := s.readPick(ctx, n, *best)
			if err != nil {
				return nil, err
			}
			if p != nil {
				for _, f := range refused {
					if f.Version.IsValid() && f.Version.Compare(v) > 0 && specs.Contains(f.Version) {
						s.note("%s: skipped %s: %s", n.name, f.Filename, f.Refused)
					}
				}
				return p, nil
			}
			// Its METADATA excludes it; another wheel of the version may fit.
			n.rejected[best.Filename] = why
		}
	}
	if sdist != nil {
		return nil, sdist
	}
	return nil, sandpit.Hintf(fmt.Errorf("%w: no wheel of %s fits %s (asked:%s); tried %s", ErrNoMatch, n.name, s.t, constraintsText(n), listed(reasons)),
		"pin a version that has a wheel for this environment")
}

// bestWheel is the most preferred usable wheel among files, or why there is
// none (and an *SdistError when an sdist is all that fits).
func (s *resolution) bestWheel(n *node, files []File, pinned bool) (*File, string, *SdistError) {
	var best *File
	bestRank := -1
	why := ""
	var sdist, other string
	others := 0
	for i := range files {
		f := &files[i]
		switch {
		case f.Kind == KindSdist:
			sdist = f.Filename
			continue
		case f.Kind != KindWheel:
			continue
		case n.rejected[f.Filename] != "":
			why = n.rejected[f.Filename]
			continue
		case f.Yanked && !pinned:
			why = "yanked"
			if f.YankedReason != "" {
				why += fmt.Sprintf(" (%.200q)", f.YankedReason)
			}
			continue
		}
		rank := s.t.Rank(f.Wheel)
		if rank < 0 {
			if other == "" {
				other = f.Filename
			}
			others++
			continue
		}
		if f.RequiresPython != "" {
			rp, err := ParseSpecifiers(f.RequiresPython)
			if err != nil {
				why = fmt.Sprintf("Requires-Python %q does not parse", f.RequiresPython)
				continue
			}
			if !rp.Contains(s.t.Python) {
				why = fmt.Sprintf("requires Python %s", f.RequiresPython)
				continue
			}
		}
		if best == nil || rank < bestRank {
			best, bestRank = f, rank
		}
	}
	if best != nil {
		return best, "", nil
	}
	if why == "" && others > 0 {
		why = fmt.Sprintf("no wheel for %s (its %d wheels are for other environments, such as %s)", s.t, others, other)
		if others == 1 {
			why = fmt.Sprintf("no wheel for %s (its wheel %s is for another environment)", s.t, other)
		}
	}
	if why == "" && sdist != "" {
		v := ""
		if len(files) > 0 {
			v = files[0].Version.String()
		}
		return nil, "only a source distribution (" + sdist + ")", &SdistError{Project: n.name, Version: v, Filename: sdist, Target: s.t.String()}
	}
	if why == "" {
		why = "no wheel"
	}
	return nil, why, nil
}

// readPick reads f's metadata and checks it: a pick, or (nil, why) when
// the metadata excludes f for the target.
func (s *resolution) readPick(ctx context.Context, n *node, f File) (*pick, string, error) {
	if err := s.step(); err != nil {
		return nil, "", err
	}
	if n.rejected == nil {
		n.rejected = map[string]string{}
	}
	p := &pick{file: f, version: f.Version, size: f.Size}
	var b []byte
	var err error
	if f.MetadataSHA256 != "" {
		if err := s.budget(0); err != nil {
			return nil, "", err
		}
		b, err = s.r.Client.Metadata(ctx, f)
		if err != nil {
			return nil, "", err
		}
		s.downloaded += int64(len(b))
	} else {
		b, err = s.wheelMetadata(ctx, f, p)
		if err != nil {
			return nil, "", err
		}
	}
	m, err := ParseMetadata(b)
	if err != nil {
		return nil, "", fmt.Errorf("the metadata of %s: %w", f.Filename, err)
	}
	mv, err := ParseVersion(m.Version)
	if Normalize(m.Name) != n.name || err != nil || !mv.Equal(f.Version) {
		return nil, "", fmt.Errorf("%w: the metadata of %s names %q %q, not %s %s", ErrBadIndex, f.Filename, m.Name, m.Version, n.name, f.Version)
	}
	if m.RequiresPython != "" {
		rp, err := ParseSpecifiers(m.RequiresPython)
		if err != nil {
			return nil, fmt.Sprintf("Requires-Python %q does not parse", m.RequiresPython), nil
		}
		if !rp.Contains(s.t.Python) {
			return nil, "requires Python " + m.RequiresPython, nil
		}
	}
	p.meta = m
	return p, "", nil
}

// budget refuses a download when what Resolve downloaded reached its
// budget (need: bytes known to be needed).
func (s *resolution) budget(need int64) error {
	if s.downloaded+need > s.r.maxDownload() {
		return limitf("pin fewer packages per call, or the operator raises the budget",
			"resolving would download over %d bytes (metadata and wheels without PEP 658 metadata)", s.r.maxDownload())
	}
	return nil
}

// wheelMetadata downloads f (into the cache, or a temporary file) within
// the budget and reads its METADATA.
func (s *resolution) wheelMetadata(ctx context.Context, f File, p *pick) ([]byte, error) {
	if err := s.budget(f.Size); err != nil {
		return nil, err
	}
	left := s.r.maxDownload() - s.downloaded
	limit := min(left, s.r.Client.maxArtifact())
	var path string
	var n int64
	var err error
	if s.r.Cache != nil {
		path, n, err = s.r.Cache.fetch(ctx, s.r.Client, f, limit)
		p.path = path
	} else {
		var tmp *os.File
		tmp, err = os.CreateTemp("", "sandpit-wheel-*.whl")
		if err != nil {
			return nil, fmt.Errorf("temporary wheel: %w", err)
		}
		path = tmp.Name()
		defer os.Remove(path)
		n, err = s.r.Client.download(ctx, f, tmp, limit)
		if cerr := tmp.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("temporary wheel: %w", cerr)
		}
	}
	s.downloaded += n
	if err != nil {
		if errors.Is(err, ErrTooLarge) && limit < s.r.Client.maxArtifact() {
			return nil, s.budget(limit + 1)
		}
		return nil, err
	}
	if st, err := os.Stat(path); err == nil {
		p.size = st.Size()
	}
	b, err := ReadWheelMetadata(path, s.r.Client.maxMetadata())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Filename, err)
	}
	return b, nil
}

// noVersion explains why no version of n satisfies specs.
func (s *resolution) noVersion(n *node, all []Version, refused []File, specs Specifiers) error {
	for _, f := range refused {
		if f.Version.IsValid() && specs.Contains(f.Version) || !f.Version.IsValid() && len(all) == 0 {
			return fmt.Errorf("%w: %s: %s", ErrRefusedFile, f.Filename, f.Refused)
		}
	}
	if len(all) == 0 {
		return fmt.Errorf("%w: the index lists no files of %s", ErrNoMatch, n.name)
	}
	// Each constraint alone admits a version, but not all together: a
	// conflict between who imposed them.
	if len(n.cons) > 1 {
		alone := true
		for _, c := range n.cons {
			if len(c.req.Specifiers.Filter(all)) == 0 {
				alone = false
			}
		}
		if alone {
			return sandpit.Hintf(fmt.Errorf("%w: no version of %s satisfies them all:%s; available: %s", ErrConflict, n.name, constraintsText(n), versionsText(all)),
				"change the requested versions so that they agree; this resolver does not try other versions of the packages that impose a constraint")
		}
	}
	return sandpit.Hintf(fmt.Errorf("%w: no version of %s matches%s; available: %s", ErrNoMatch, n.name, constraintsText(n), versionsText(all)),
		"ask for one of the available versions")
}

func constraintsText(n *node) string {
	var parts []string
	for _, c := range n.cons {
		parts = append(parts, c.String())
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	return " " + listed(parts)
}

func versionsText(vs []Version) string {
	parts := make([]string, 0, min(len(vs), maxListed))
	for _, v := range vs[:min(len(vs), maxListed)] {
		parts = append(parts, v.String())
	}
	s := strings.Join(parts, ", ")
	if len(vs) > maxListed {
		s += fmt.Sprintf(" and %d older", len(vs)-maxListed)
	}
	return s
}

func listed(items []string) string {
	s := strings.Join(items[:min(len(items), maxListed)], "; ")
	if len(items) > maxListed {
		s += fmt.Sprintf("; and %d more", len(items)-maxListed)
	}
	return s
}

// plan lists the picks reachable from the request, in first-required
// order.
func (s *resolution) plan() *Plan {
	reach := map[string]bool{}
	var walk []*node
	for _, n := range s.nodes {
		if n.pick != nil && slices.ContainsFunc(n.cons, func(c constraint) bool { return c.by == byRequest }) {
			reach[n.name] = true
			walk = append(walk, n)
		}
	}
	for len(walk) > 0 {
		n := walk[0]
		walk = walk[1:]
		for _, d := range n.pick.deps {
			if m := s.nodes[d.Name]; m != nil && m.pick != nil && !reach[m.name] {
				reach[m.name] = true
				walk = append(walk, m)
			}
		}
	}
	p := &Plan{Notes: s.notes}
	if s.moreNotes > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("and %d more notes", s.moreNotes))
	}
	var nodes []*node
	for name := range reach {
		nodes = append(nodes, s.nodes[name])
	}
	slices.SortFunc(nodes, func(a, b *node) int { return a.order - b.order })
	for _, n := range nodes {
		var by []string
		for _, c := range n.cons {
			if c.byName == "" || reach[c.byName] && c.byName != n.name {
				by = append(by, c.by)
			}
		}
		slices.Sort(by)
		p.Packages = append(p.Packages, Planned{
			Name:       n.name,
			Version:    n.pick.version,
			File:       n.pick.file,
			Extras:     n.pick.extras,
			RequiredBy: slices.Compact(by),
			Path:       n.pick.path,
			Size:       n.pick.size,
		})
	}
	return p
}
