/* Loading a shared library when a command first needs it rather than at process start.
 *
 * The dynamic loader maps and relocates every DT_NEEDED library before main().
 * libcurl brings ~20 more (TLS, Kerberos, LDAP, SSH...); linked, they would cost every
 * mote process, each restored or forked VM included, ~14 ms of startup on the
 * development machine (an empty program: ~1 ms). Only the control API's client
 * (api_client.c) needs it. */
#ifndef MOTE_SHARED_LIB_H
#define MOTE_SHARED_LIB_H

#include <stddef.h>

/* A symbol to resolve and where its address goes. */
struct shared_lib_symbol {
	const char *name;
	void **address;
};

/* Opens the library soname and resolves every symbol into *address. The handle for
 * shared_lib_close() on success; NULL on failure, every *address left NULL and error
 * saying what is missing (the library, or which symbol). */
void *shared_lib_open(const char *soname, const struct shared_lib_symbol *symbols, size_t count,
		      char *error, size_t error_len);

/* Releases a handle from shared_lib_open(); NULL is ignored. */
void shared_lib_close(void *handle);

#endif
