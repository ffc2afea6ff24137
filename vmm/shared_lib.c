/* Loading a shared library on first use (shared_lib.h). */
#include "shared_lib.h"

#include <dlfcn.h>
#include <stdio.h>

void *shared_lib_open(const char *soname, const struct shared_lib_symbol *symbols, size_t count,
		      char *error, size_t error_len)
{
	for (size_t i = 0; i < count; i++)
		*symbols[i].address = NULL;
	/* RTLD_LOCAL: its symbols stay out of the global namespace other loads search.
	 * RTLD_LAZY: the functions these libraries call among themselves are bound on their
	 * first call, not all at once; libcurl pulls in TLS, Kerberos, LDAP and more, and
	 * binding every one of their calls up front costs time no request needs. The
	 * functions mote calls are looked up below, so a missing one is still an error
	 * here rather than later. */
	void *handle = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
	if (!handle) {
		snprintf(error, error_len, "cannot load %s: %s", soname, dlerror());
		return NULL;
	}
	for (size_t i = 0; i < count; i++) {
		void *address = dlsym(handle, symbols[i].name);
		if (!address) {
			snprintf(error, error_len, "%s has no %s", soname, symbols[i].name);
			for (size_t j = 0; j < i; j++)
				*symbols[j].address = NULL;
			dlclose(handle);
			return NULL;
		}
		*symbols[i].address = address;
	}
	return handle;
}

void shared_lib_close(void *handle)
{
	if (handle)
		dlclose(handle);
}
