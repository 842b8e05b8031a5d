package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is who sandpit's server-side applies are recorded as.
const FieldManager = "sandpit"

// Apply applies every object of manifests (YAML documents separated by
// ---) with server-side apply, in namespace where an object is namespaced
// and names none; it waits until each CustomResourceDefinition is
// Established before going on, so later documents may use it. A field
// the API does not know is an error, not dropped. It returns the objects
// as applied.
func Apply(ctx context.Context, cfg *rest.Config, manifests []byte, namespace string) ([]*unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return out, fmt.Errorf("manifest document %d: %w", len(out)+1, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset() // a CRD applied above: discover again
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return out, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
			}
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			res = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		got, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		if err != nil {
			return out, fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		if gvk.Kind == "CustomResourceDefinition" {
			if err := waitEstablished(ctx, res, got.GetName()); err != nil {
				return out, err
			}
		}
		out = append(out, got)
	}
	return out, nil
}

func waitEstablished(ctx context.Context, res dynamic.ResourceInterface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		got, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("CustomResourceDefinition %s: %w", name, err)
		}
		if err == nil && Established(got) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CustomResourceDefinition %s is not Established: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Established reports whether a CustomResourceDefinition is served.
func Established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
