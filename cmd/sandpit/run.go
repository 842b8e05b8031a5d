package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run one snippet in a sandbox and print the result",
		ArgsUsage: "[CODE | -f FILE] [-- ARGS...]",
		Description: `Runs code the way run_code does and prints its output. The exit status is
the program's. Examples:
   sandpit run -l python 'print(1)'
   sandpit run -f hello.c
   echo data | sandpit run -l bash --stdin 'tr a-z A-Z'`,
		Flags: append(containerdFlags(),
			&cli.StringFlag{Name: "language", Aliases: []string{"l"}, Usage: "python, c, cpp, bash, javascript or another language of the catalog (default: from the file extension)"},
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "read the code from this file"},
			&cli.BoolFlag{Name: "stdin", Usage: "pass this command's standard input to the program"},
			&cli.DurationFlag{Name: "timeout", Value: sandpit.DefaultTimeout},
			&cli.BoolFlag{Name: "json", Usage: "print the whole result as JSON"},
		),
		Action: func(c *cli.Context) error {
			req, err := runRequest(c)
			if err != nil {
				return err
			}
			in, err := acquireInstance(c)
			if err != nil {
				return err
			}
			defer in.Remove() // after the runtime is closed: nothing of it is left
			rt, err := newRuntime(c, in)
			if err != nil {
				return err
			}
			defer rt.Close()
			// The program's output shows as it is written (all of it: the
			// result keeps only --output-kb per stream).
			streamed := !c.Bool("json")
			if streamed {
				var mu sync.Mutex
				req.Output = func(s sandpit.Stream, p []byte) {
					mu.Lock()
					defer mu.Unlock()
					if s == sandpit.Stderr {
						c.App.ErrWriter.Write(p)
					} else {
						c.App.Writer.Write(p)
					}
				}
			}
			res, err := rt.Run(c.Context, req)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				if !streamed {
					fmt.Fprint(c.App.Writer, res.Stdout)
					fmt.Fprint(c.App.ErrWriter, res.Stderr)
				}
				if res.Status != sandpit.StatusSuccess {
					fmt.Fprintf(c.App.ErrWriter, "sandpit: %s (exit code %d) in %d ms\n", res.Status, res.ExitCode, res.DurationMS)
				}
			}
			if res.ExitCode != 0 || res.Status != sandpit.StatusSuccess {
				return cli.Exit("", max(res.ExitCode, 1))
			}
			return nil
		},
	}
}

// extLanguages adds extensions the catalog's file names do not say.
var extLanguages = map[string]string{".cc": "cpp", ".cxx": "cpp", ".bash": "bash", ".mjs": "javascript"}

// languageOf guesses a file's language from its extension: the catalog's
// source file names first (main.py → python).
func languageOf(c *cli.Context, file string) string {
	ext := strings.ToLower(filepath.Ext(file))
	for _, l := range mustCatalog(c).Languages {
		if strings.EqualFold(filepath.Ext(l.File), ext) {
			return l.Name
		}
	}
	return extLanguages[ext]
}

func runRequest(c *cli.Context) (sandpit.Request, error) {
	req := sandpit.Request{Language: c.String("language"), Timeout: c.Duration("timeout")}
	args := c.Args().Slice()
	switch f := c.String("file"); {
	case f != "":
		b, err := os.ReadFile(f)
		if err != nil {
			return req, err
		}
		req.Code = string(b)
		if req.Language == "" {
			req.Language = languageOf(c, f)
		}
		req.Args = args
	case len(args) > 0:
		req.Code, req.Args = args[0], args[1:]
	default:
		return req, errors.New("give the code as an argument or with -f FILE")
	}
	if req.Language == "" {
		return req, errors.New("say which language with -l (`sandpit images catalog` lists them)")
	}
	if c.Bool("stdin") {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		if err != nil {
			return req, err
		}
		req.Stdin = b
	}
	return req, nil
}
