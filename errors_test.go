package sandpit

import (
	"errors"
	"fmt"
	"testing"
)

func TestClassOf(t *testing.T) {
	errSentinel := Define(ErrNotFound, "unknown snapshot")
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"plain error is internal", errors.New("open /var/lib/x: permission denied"), nil},
		{"class itself", ErrConflict, ErrConflict},
		{"wrapped class", fmt.Errorf("write x: %w", ErrResourceExhausted), ErrResourceExhausted},
		{"defined sentinel", errSentinel, ErrNotFound},
		{"wrapped sentinel", fmt.Errorf("restore abc: %w", errSentinel), ErrNotFound},
		{"hinted sentinel", WithHint(fmt.Errorf("x: %w", errSentinel), "list them"), ErrNotFound},
		{"joined", errors.Join(errors.New("dial"), Define(ErrUnavailable, "containerd")), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClassOf(tt.err); got != tt.want {
				t.Errorf("ClassOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestDefineKeepsSentinelIdentity(t *testing.T) {
	a := Define(ErrInvalidArgument, "same text")
	b := Define(ErrInvalidArgument, "same text")
	if errors.Is(a, b) {
		t.Error("two sentinels with the same text must stay distinct")
	}
	if !errors.Is(fmt.Errorf("ctx: %w", a), a) {
		t.Error("a wrapped sentinel must match itself")
	}
}

func TestHint(t *testing.T) {
	base := fmt.Errorf("image x: %w", Define(ErrUnavailable, "image not available"))
	err := fmt.Errorf("run: %w", WithHint(base, "run `sandpit images build`"))
	if got, want := err.Error(), "run: image x: image not available"; got != want {
		t.Errorf("Error() = %q, want %q (the hint stays out of the message)", got, want)
	}
	if got, want := HintOf(err), "run `sandpit images build`"; got != want {
		t.Errorf("HintOf = %q, want %q", got, want)
	}
	if got, want := Describe(err), "run: image x: image not available (hint: run `sandpit images build`)"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if WithHint(nil, "x") != nil {
		t.Error("WithHint(nil) must stay nil")
	}
	if HintOf(errors.New("plain")) != "" {
		t.Error("a plain error has no hint")
	}
}
