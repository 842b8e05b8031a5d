// Package cluster is sandpit across hosts on Kubernetes, with the API
// server as the only shared state and its optimistic concurrency as the
// only lock:
//
//   - a node agent announces itself with a coordination.k8s.io Lease
//     (Agent): renewed while it serves, released when it stops, marked
//     when it drains. A node whose Lease lapsed is gone.
//   - a front door places each tenant's workspace on a live node and
//     records it in a SandpitWorkspace object (Placer); two front doors
//     placing one tenant at once both end with the one record the API
//     server accepted (create, or update at the resourceVersion read).
//     A tenant whose node is gone or draining is moved on its next call.
//
// Why a CRD rather than Leases for placements: a placement is desired
// state with a history (where from, why, when) that an operator reads with
// kubectl and RBAC can grant apart from node membership; Leases carry
// liveness, which the kubelet and the Lease API already model.
package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/sandpit-dev/sandpit"
)

// The SandpitWorkspace resource (scripts/kubernetes/crd.yaml).
var WorkspaceGVR = schema.GroupVersionResource{Group: "sandpit.dev", Version: "v1alpha1", Resource: "sandpitworkspaces"}

const (
	// WorkspaceKind is the kind of WorkspaceGVR.
	WorkspaceKind = "SandpitWorkspace"
	// LeasePrefix names a node's Lease: LeasePrefix + node name.
	LeasePrefix = "sandpit-node-"
	// LabelComponent marks sandpit's Leases, so a listing finds only them.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentNode is LabelComponent's value on a node agent's Lease.
	ComponentNode = "sandpit-node"
	// AnnotationEndpoint is the URL a node agent serves at.
	AnnotationEndpoint = "sandpit.dev/endpoint"
	// AnnotationDraining is set (to the time it started) when a node is
	// being drained: nothing new is placed there, and its tenants move.
	AnnotationDraining = "sandpit.dev/draining"
	// LabelTenantHash labels a SandpitWorkspace with its object name's
	// source, so a tenant name never needs to be a valid object name.
	LabelTenantHash = "sandpit.dev/tenant-hash"
)

// ErrNoNodes: no live node agent to place a workspace on.
var ErrNoNodes = sandpit.Define(sandpit.ErrUnavailable, "no sandpit node is available")

// errConflict: another writer changed the object; read it again.
var errConflict = errors.New("placement changed meanwhile")

// Node is a node agent as its Lease shows it.
type Node struct {
	Name     string
	Endpoint string
	Holder   string
	Renewed  time.Time
	Expires  time.Time
	Draining bool
}

// Live reports whether the node's Lease holds at now.
func (n Node) Live(now time.Time) bool { return !n.Renewed.IsZero() && now.Before(n.Expires) }

// objectName is a tenant's SandpitWorkspace name: tenant names are token
// names or OAuth subjects, not DNS labels.
func objectName(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return "ws-" + hex.EncodeToString(sum[:12])
}

// Tune sets cfg's client-side rate limit for a front door or node agent:
// client-go's default (5 requests a second, bursts of 10) throttles a
// placement, which makes three or four requests, to ~1 a second when
// tenants arrive together. The API server's priority and fairness is what
// bounds the load.
func Tune(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}
