package sandpit

import (
	"errors"
	"fmt"
)

// Error classes, as containerd's errdefs has them. Every error a caller can
// act on is of one class: it wraps the class directly or a package sentinel
// declared with Define. An error of no class is internal: the server or its
// host is broken, and its text (which may name host paths) is for the log,
// not for the model.
var (
	// ErrInvalidArgument: the request is wrong; the caller can fix it.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: what the request names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: something the server needs (containerd, an image, a
	// capability of the host) is not there; the operator can fix it, or it
	// comes back by itself.
	ErrUnavailable = errors.New("unavailable")
	// ErrResourceExhausted: a limit or quota was reached.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrConflict: the state does not allow it now (it exists, it is busy).
	ErrConflict = errors.New("conflict")
)

var classes = []error{ErrInvalidArgument, ErrNotFound, ErrUnavailable, ErrResourceExhausted, ErrConflict}

// ClassOf returns err's class, one of the Err* classes, or nil when err is
// internal (or nil).
func ClassOf(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// Define declares a package's sentinel error of a class: its text is msg
// alone, and errors.Is(sentinel, class) holds, so the MCP boundary needs to
// know only the classes, never each package's sentinels.
func Define(class error, msg string) error { return &defined{class: class, msg: msg} }

type defined struct {
	class error
	msg   string
}

func (d *defined) Error() string        { return d.msg }
func (d *defined) Is(target error) bool { return target == d.class }

// Hinter is an error that carries advice for whoever reads it (the model,
// or an operator), kept apart from its message.
type Hinter interface{ Hint() string }

// WithHint attaches advice to err; Error() stays err's text, and HintOf
// finds the advice. A nil err stays nil.
func WithHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &hinted{err: err, hint: hint}
}

// Hintf is WithHint with a formatted hint.
func Hintf(err error, format string, a ...any) error {
	return WithHint(err, fmt.Sprintf(format, a...))
}

type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }
func (h *hinted) Hint() string  { return h.hint }

// HintOf returns the outermost hint in err's chain, or "".
func HintOf(err error) string {
	var h Hinter
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// Describe is err's text with its hint, for humans at a terminal:
// "containerd is not reachable at X: ... (hint: ...)".
func Describe(err error) string {
	if err == nil {
		return ""
	}
	if h := HintOf(err); h != "" {
		return err.Error() + " (hint: " + h + ")"
	}
	return err.Error()
}

// Newf is a one-off error of a class whose whole text, formatted, is for
// the caller: sandpit.Newf(sandpit.ErrInvalidArgument, "code is empty").
func Newf(class error, format string, a ...any) error {
	return &defined{class: class, msg: fmt.Sprintf(format, a...)}
}
