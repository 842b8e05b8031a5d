// Command containerd-shim-sandpit-v1 is the runtime binary containerd
// execs for every task of sandpit's own runtime ("sandpit"). It does no work
// of its own: sandboxes are served by one long-lived shim per sandpit
// instance (cmd/sandpit-shim, started by sandpit), and this binary only
// answers the two execs containerd makes per task whatever the shim —
//
//	start:  print the address of that shim, read from the task's runtime
//	        options (options.Options.TaskApiAddress, on stdin), and record it
//	        in the bundle's "address" file, where a restarted containerd
//	        finds it;
//	delete: exit 0 with empty output. containerd runs it after every
//	        disconnect, a normal task delete included (it closes its
//	        connection to the shim then); the shim has already deleted the
//	        task, and a shim that died is cleaned up by its owner, which
//	        starts a fresh one that destroys what the dead one held.
//
// It imports nothing but the standard library, so that each exec costs the
// ~2 ms of CPU a small Go program costs, not the ~6 ms of a binary linking
// the shim library and libcontainer (measured on the CI host). That also
// makes it a static binary, which is its third use: inside each sandbox it
// loads the seccomp filter the shim compiled once, then execs the program
// (seccomp.go).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == seccompExecMode {
		os.Exit(seccompExec(os.Args[2:])) // returns only on failure
	}
	action := ""
	if len(os.Args) > 1 {
		action = os.Args[len(os.Args)-1]
	}
	var err error
	switch action {
	case "start":
		err = start(os.Stdin, os.Stdout)
	case "delete":
		// Empty stdout is a valid, zero DeleteResponse.
	case "-v", "--version", "version":
		fmt.Println("containerd-shim-sandpit-v1 (sandpit's runtime: start and delete only; tasks are served by sandpit-shim)")
	default:
		err = fmt.Errorf("unknown action %q: containerd runs this binary with start or delete", action)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "containerd-shim-sandpit-v1:", err)
		os.Exit(1)
	}
}

// start prints the task API address carried in the runtime options (a
// protobuf Any of containerd's runc options) and writes it to ./address:
// containerd runs start in the task's bundle directory.
func start(in io.Reader, out io.Writer) error {
	raw, err := io.ReadAll(io.LimitReader(in, 1<<20))
	if err != nil {
		return fmt.Errorf("read runtime options: %w", err)
	}
	addr, err := taskAPIAddress(raw)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(addr, "unix://") {
		return fmt.Errorf("task API address %q is not a unix socket", addr)
	}
	if err := writeAddress("address", addr); err != nil {
		return err
	}
	_, err = io.WriteString(out, addr)
	return err
}

// writeAddress writes the file atomically, as containerd's shims do.
func writeAddress(path, addr string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(addr), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Field numbers: google.protobuf.Any{type_url = 1, value = 2} and
// containerd.runc.v1.Options{task_api_address = 12}.
const (
	anyTypeURL     = 1
	anyValue       = 2
	taskAPIAddrFld = 12
	optionsTypeURL = "containerd.runc.v1.Options"
)

var errNoAddress = errors.New("no task API address in the runtime options: this runtime is started by sandpit (--runtime sandpit), which passes its shim's address")

// taskAPIAddress decodes just enough protobuf to find the address.
func taskAPIAddress(b []byte) (string, error) {
	var typeURL string
	var value []byte
	err := fields(b, func(num int, data []byte) {
		switch num {
		case anyTypeURL:
			typeURL = string(data)
		case anyValue:
			value = data
		}
	})
	if err != nil {
		return "", fmt.Errorf("runtime options: %w", err)
	}
	if typeURL == "" {
		return "", errNoAddress
	}
	if !strings.HasSuffix(typeURL, optionsTypeURL) {
		return "", fmt.Errorf("runtime options are %s, want %s", typeURL, optionsTypeURL)
	}
	var addr string
	if err := fields(value, func(num int, data []byte) {
		if num == taskAPIAddrFld {
			addr = string(data)
		}
	}); err != nil {
		return "", fmt.Errorf("runtime options: %w", err)
	}
	if addr == "" {
		return "", errNoAddress
	}
	return addr, nil
}

// fields calls fn for every length-delimited field of a protobuf message
// and skips the others.
func fields(b []byte, fn func(num int, data []byte)) error {
	for len(b) > 0 {
		key, n := uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		num, typ := int(key>>3), key&7
		switch typ {
		case 0: // varint
			_, n = uvarint(b)
			if n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
		case 1: // 64-bit
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			b = b[8:]
		case 2: // length-delimited
			l, n := uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errors.New("bad length")
			}
			fn(num, b[n:n+int(l)])
			b = b[n+int(l):]
		case 5: // 32-bit
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			b = b[4:]
		default:
			return fmt.Errorf("unsupported wire type %d", typ)
		}
	}
	return nil
}

func uvarint(b []byte) (uint64, int) {
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		x |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}
