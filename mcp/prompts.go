package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
)

// addPrompts registers the prompts whose dependencies are set.
func addPrompts(s *server.MCPServer, cfg Config) {
	if cfg.Runner != nil {
		s.AddPrompt(mcpgo.NewPrompt("generate_secure_script",
			mcpgo.WithPromptDescription("Ask for a script that fits this sandbox's actual constraints: no network, the limits in effect, the workspace, the languages and versions available."),
			mcpgo.WithArgument("task", mcpgo.RequiredArgument(), mcpgo.ArgumentDescription("what the script should do")),
			mcpgo.WithArgument("language", mcpgo.ArgumentDescription("the language to write it in (default: your choice among those available)")),
		), func(ctx context.Context, req mcpgo.GetPromptRequest) (*mcpgo.GetPromptResult, error) {
			task := strings.TrimSpace(req.Params.Arguments["task"])
			if task == "" {
				return nil, fmt.Errorf("generate_secure_script: the task argument is required: say what the script should do")
			}
			lang := strings.ToLower(strings.TrimSpace(req.Params.Arguments["language"]))
			if lang != "" && !hasLanguage(cfg.Runner.Languages(), lang) {
				return nil, fmt.Errorf("generate_secure_script: unknown language %q: use one of %s", lang, cfg.languageNames())
			}
			text := secureScriptPrompt(cfg.status(ctx), task, lang)
			return mcpgo.NewGetPromptResult("Write a script that runs in this sandbox",
				[]mcpgo.PromptMessage{mcpgo.NewPromptMessage(mcpgo.RoleUser, mcpgo.NewTextContent(text))}), nil
		})
	}
	if cfg.History != nil {
		s.AddPrompt(mcpgo.NewPrompt("fix_failed_run",
			mcpgo.WithPromptDescription("Given a past run's id, show its code, status, error and output, and ask for a corrected program."),
			mcpgo.WithArgument("run_id", mcpgo.RequiredArgument(), mcpgo.ArgumentDescription("the id of the run to fix (from run_code or get_execution_history)")),
		), func(ctx context.Context, req mcpgo.GetPromptRequest) (*mcpgo.GetPromptResult, error) {
			r, err := getRun(ctx, cfg.History, req.Params.Arguments["run_id"])
			if err != nil {
				return nil, fmt.Errorf("fix_failed_run: %w", err)
			}
			text := fixRunPrompt(record(r), cfg.status(ctx))
			return mcpgo.NewGetPromptResult("Fix run "+r.ID,
				[]mcpgo.PromptMessage{mcpgo.NewPromptMessage(mcpgo.RoleUser, mcpgo.NewTextContent(text))}), nil
		})
	}
}

func hasLanguage(ls []sandpit.Language, name string) bool {
	for _, l := range ls {
		if strings.EqualFold(l.Name, name) {
			return true
		}
		for _, a := range l.Aliases {
			if strings.EqualFold(a, name) {
				return true
			}
		}
	}
	return false
}

// secureScriptPrompt is built from the live configuration: every number in
// it is a limit the sandbox enforces now.
func secureScriptPrompt(s StatusReport, task, lang string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Write a program for this task:\n\n%s\n\n", task)
	b.WriteString("It will run with the run_code tool in a single-use, locked-down container. Write it to fit these constraints, which are the ones in effect now:\n\n")

	b.WriteString("Languages available")
	if lang != "" {
		fmt.Fprintf(&b, " (write it in %s)", lang)
	}
	b.WriteString(":\n")
	for _, l := range s.Languages {
		fmt.Fprintf(&b, "- %s %s", l.Name, l.Version)
		if l.Description != "" {
			fmt.Fprintf(&b, ": %s", l.Description)
		}
		installable := slices.Contains(s.Packages, l.Name)
		switch libs := s.Libraries[l.Name]; {
		case len(libs) > 0 && installable:
			fmt.Fprintf(&b, "; it can import, beyond the standard library: %s; more only through the install_packages tool (before the run, from the operator's package source)", strings.Join(libs, ", "))
		case len(libs) > 0:
			fmt.Fprintf(&b, "; it can import, beyond the standard library: %s (nothing else can be installed)", strings.Join(libs, ", "))
		case installable:
			b.WriteString("; packages only through the install_packages tool (before the run, from the operator's package source)")
		default:
			b.WriteString("; nothing beyond what the image ships, and nothing can be installed")
		}
		b.WriteString("\n")
	}

	b.WriteString("\nIsolation:\n")
	if len(s.Packages) > 0 {
		b.WriteString("- No network at all: no downloads, no DNS, no sockets to other hosts; the program itself cannot install packages (pip and npm have no network): install_packages does that before the run. Everything else must be computed locally or read from files.\n")
	} else {
		b.WriteString("- No network at all: no downloads, no package installs, no DNS, no sockets to other hosts. Everything must be computed locally or read from files.\n")
	}
	b.WriteString("- The root filesystem is read-only; write scratch files under /tmp")
	if l := s.Limits; l != nil && l.TmpfsBytes > 0 {
		fmt.Fprintf(&b, " (a tmpfs of %s, counted against memory)", bytesText(l.TmpfsBytes))
	}
	b.WriteString(".\n")
	if s.Workspace != "" {
		fmt.Fprintf(&b, "- The agent's files are at %s (the working directory); read inputs from there and write results there, and they persist after the run.\n", s.Workspace)
	} else {
		b.WriteString("- There is no persistent workspace: anything written is gone after the run, so print the results.\n")
	}
	b.WriteString("- No root privileges or capabilities; do not try to change system settings.\n")
	if s.Workspace != "" {
		b.WriteString("- Charts and images: save them as PNG (e.g. matplotlib's plt.savefig(\"chart.png\"); plt.show() saves figure-N.png) in the working directory; images the run writes there are shown to you after the run, and other files it writes are linked.\n")
	}

	b.WriteString("\nLimits (the program is killed, or its output cut, when it exceeds them):\n")
	fmt.Fprintf(&b, "- Wall-clock time: %gs by default, at most %gs if asked for with timeout_seconds.\n", s.DefaultTimeoutSeconds, s.MaxTimeoutSeconds)
	if l := s.Limits; l != nil {
		if l.MemoryBytes > 0 {
			fmt.Fprintf(&b, "- Memory: %s in total, including /tmp files; stream large data instead of loading it whole.\n", bytesText(l.MemoryBytes))
		}
		if l.CPUs > 0 {
			fmt.Fprintf(&b, "- CPU: %g core(s); parallelism beyond that gains nothing.\n", l.CPUs)
		}
		if l.PidsMax > 0 {
			fmt.Fprintf(&b, "- Processes and threads: at most %d.\n", l.PidsMax)
		}
		if l.OutputBytes > 0 {
			fmt.Fprintf(&b, "- Output: %s per stream (stdout, stderr) is kept; print summaries, not bulk data.\n", bytesText(l.OutputBytes))
		}
		if l.FileSizeBytes > 0 {
			fmt.Fprintf(&b, "- Largest file the program may write: %s.\n", bytesText(l.FileSizeBytes))
		}
		if l.OpenFiles > 0 {
			fmt.Fprintf(&b, "- Open files: at most %d.\n", l.OpenFiles)
		}
		if len(l.Unenforced) > 0 {
			fmt.Fprintf(&b, "- Note: this host cannot enforce %s; stay within them anyway.\n", strings.Join(l.Unenforced, ", "))
		}
	} else {
		b.WriteString("- Memory, CPU, process and output limits apply; get_sandbox_metrics and sandbox://status show them.\n")
	}
	fmt.Fprintf(&b, "- Source code and stdin: at most %s each.\n", bytesText(int64(s.MaxCodeBytes)))

	b.WriteString("\nMake the program exit 0 on success and non-zero with a clear message on stderr on failure. Then run it with run_code and check its status, output and usage.\n")
	return b.String()
}

// fixRunPrompt shows what went wrong in r and asks for a fix.
func fixRunPrompt(r RunRecord, s StatusReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "This %s program, run in the sandbox as run %s, ended with status %s (exit code %d) after %d ms.\n",
		r.Language, r.ID, r.Status, r.ExitCode, r.DurationMS)
	switch sandpit.Status(r.Status) {
	case sandpit.StatusTimeout:
		lim := s.MaxTimeoutSeconds
		if r.Limits != nil && r.Limits.TimeoutSeconds > 0 {
			fmt.Fprintf(&b, "It was killed at its %gs time limit (at most %gs can be asked for).", r.Limits.TimeoutSeconds, lim)
		} else {
			fmt.Fprintf(&b, "It was killed at its time limit (at most %gs can be asked for).", lim)
		}
		b.WriteString(" Find what takes so long (an endless loop, a blocking read of stdin, a slow algorithm) and make it finish in time.\n")
	case sandpit.StatusOOM:
		fmt.Fprintf(&b, "It ran out of memory: peak %s", bytesText(r.MemoryPeakBytes))
		if r.Limits != nil && r.Limits.MemoryBytes > 0 {
			fmt.Fprintf(&b, " against a limit of %s", bytesText(r.Limits.MemoryBytes))
		}
		b.WriteString(". Use less memory: stream data, use smaller types, free what is no longer needed.\n")
	case sandpit.StatusCompileError:
		b.WriteString("The compiler rejected it; the errors are in stderr below.\n")
	case sandpit.StatusError:
		b.WriteString("It failed at run time; the error is most likely in stderr below.\n")
	case sandpit.StatusSuccess:
		b.WriteString("It exited successfully; check whether its output is what was wanted.\n")
	}
	if r.Path != "" {
		fmt.Fprintf(&b, "\nIt ran the workspace file %s (its source is in the workspace).\n", textName(r.Path))
	} else {
		fmt.Fprintf(&b, "\nCode:\n```%s\n%s\n```\n", r.Language, strings.TrimSuffix(r.Code, "\n"))
	}
	output := func(name, head string, total int64, truncated bool) {
		if head == "" {
			fmt.Fprintf(&b, "\n%s: (empty)\n", name)
			return
		}
		fmt.Fprintf(&b, "\n%s", name)
		if int64(len(head)) < total || truncated {
			fmt.Fprintf(&b, " (first %d of %d bytes)", len(head), total)
		}
		// Fenced line by line, not in a ``` block the program could close.
		b.WriteString(" (each line after \"| \"):\n")
		writeFenced(&b, head)
	}
	output("stderr", r.StderrHead, r.StderrBytes, r.StderrTruncated)
	output("stdout", r.StdoutHead, r.StdoutBytes, r.StdoutTruncated)
	fmt.Fprintf(&b, "\nUsage: %d ms CPU (user %d, system %d), peak memory %s.\n",
		r.CPUUserMS+r.CPUSystemMS, r.CPUUserMS, r.CPUSystemMS, bytesText(r.MemoryPeakBytes))
	b.WriteString("\nExplain the cause in a sentence or two, then give the corrected program in full. Remember the sandbox has no network and a read-only filesystem outside /tmp")
	if s.Workspace != "" {
		fmt.Fprintf(&b, " and %s", s.Workspace)
	}
	b.WriteString(". Run the fix with run_code to confirm it works.\n")
	return b.String()
}

// bytesText prints a size the way people write limits: 256 MiB, 64 KiB, 10 B.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.4g KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
