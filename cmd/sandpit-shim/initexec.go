package main

/*
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SANDPIT_INIT_FD 5
#define SANDPIT_INIT_FD_PATH "/proc/self/fd/5"
#define SANDPIT_INIT_NAME "/memfd:runc_cloned:sandpit-shim-init"
#define SANDPIT_INIT_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

// A sandbox's init starts as this binary ("sandpit-shim init", from
// libcontainer) and becomes sandpit-shim-init before anything else runs:
// before nsexec (an unprioritised constructor, which runs after this
// prioritised one) and before the Go runtime and the package initialisers
// of everything this binary links. Only a sealed memfd of that name at
// SANDPIT_INIT_FD, which the shim passes with the loader, is executed;
// otherwise, or if the exec fails, this binary's own init runs, as before.
__attribute__((constructor(101))) static void sandpit_init_exec(int argc, char **argv, char **envp) {
	char link[sizeof SANDPIT_INIT_NAME + 16];
	ssize_t n;
	int seals;

	if (argc < 2 || strcmp(argv[1], "init") != 0 || getenv("_LIBCONTAINER_INITPIPE") == NULL)
		return;
	n = readlink(SANDPIT_INIT_FD_PATH, link, sizeof link - 1);
	if (n < 0)
		return;
	link[n] = '\0';
	if (strncmp(link, SANDPIT_INIT_NAME, strlen(SANDPIT_INIT_NAME)) != 0)
		return;
	seals = fcntl(SANDPIT_INIT_FD, F_GET_SEALS);
	if (seals < 0 || (seals & SANDPIT_INIT_SEALS) != SANDPIT_INIT_SEALS)
		return;
	fexecve(SANDPIT_INIT_FD, argv, envp);
}
*/
import "C"

import "github.com/sandpit-dev/sandpit/runtime/shim"

// The constructor and the shim agree on where the init binary is: each
// array below has a negative length, a compile error, if they do not.
var (
	_ [shim.InitFD - C.SANDPIT_INIT_FD]struct{}
	_ [C.SANDPIT_INIT_FD - shim.InitFD]struct{}
)
