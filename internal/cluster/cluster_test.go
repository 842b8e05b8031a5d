package cluster

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestNodeOfLease(t *testing.T) {
	renewed := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	lease := func(annotations map[string]string, renew bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeasePrefix + "n1", Annotations: annotations},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1/abc"), LeaseDurationSeconds: ptr.To(int32(15))}}
		if renew {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewed))
		}
		return l
	}
	tests := []struct {
		name         string
		lease        *coordinationv1.Lease
		at           time.Time
		wantLive     bool
		wantDraining bool
	}{
		{"fresh", lease(map[string]string{AnnotationEndpoint: "https://n1:8443"}, true), renewed.Add(14 * time.Second), true, false},
		{"lapsed", lease(nil, true), renewed.Add(15 * time.Second), false, false},
		{"never renewed", lease(nil, false), renewed, false, false},
		{"draining", lease(map[string]string{AnnotationDraining: "x"}, true), renewed, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := nodeOf(tt.lease)
			if n.Name != "n1" || n.Holder != "n1/abc" {
				t.Errorf("node %+v: want name n1, holder n1/abc", n)
			}
			if got := n.Live(tt.at); got != tt.wantLive {
				t.Errorf("Live(%v) = %v, want %v (renewed %v, expires %v)", tt.at, got, tt.wantLive, n.Renewed, n.Expires)
			}
			if n.Draining != tt.wantDraining {
				t.Errorf("Draining = %v, want %v", n.Draining, tt.wantDraining)
			}
		})
	}
}

func TestObjectName(t *testing.T) {
	seen := map[string]string{}
	for _, tenant := range []string{"alice", "Alice", "user@example.com", "https://issuer/|sub 1", strings.Repeat("x", 500)} {
		n := objectName(tenant)
		if len(n) > 63 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Errorf("objectName(%q) = %q: not a DNS label", tenant, n)
		}
		if other, ok := seen[n]; ok {
			t.Errorf("objectName(%q) = objectName(%q) = %q", tenant, other, n)
		}
		seen[n] = tenant
	}
}

func TestMovedWhy(t *testing.T) {
	now := time.Now()
	nodes := []Node{{Name: "a", Renewed: now.Add(-time.Minute), Expires: now.Add(-45 * time.Second)}, {Name: "b", Draining: true, Renewed: now, Expires: now.Add(time.Minute)}}
	for from, want := range map[string]string{"a": "lapsed", "b": "draining", "c": "gone", "": "no node"} {
		if got := movedWhy(nodes, from, now); !strings.Contains(got, want) {
			t.Errorf("movedWhy(%q) = %q, want it to say %q", from, got, want)
		}
	}
}
