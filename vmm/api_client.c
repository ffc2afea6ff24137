/* The control API's client (api_client.h). libcurl is loaded for each request, not
 * linked (shared_lib.h says why), so its calls go through a table of its functions. */
#include "api_client.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared_lib.h"

/* A reply larger than this is not one a mote sends. */
#define API_CLIENT_REPLY_MAX (1 << 20)
#define API_CLIENT_CONNECT_TIMEOUT_S 5L

/* The libcurl functions the client calls, typed by curl.h's own declarations. */
struct curl_functions {
	__typeof__(curl_global_init) *global_init;
	__typeof__(curl_global_cleanup) *global_cleanup;
	__typeof__(curl_easy_init) *easy_init;
	__typeof__(curl_easy_setopt) *easy_setopt;
	__typeof__(curl_easy_perform) *easy_perform;
	__typeof__(curl_easy_getinfo) *easy_getinfo;
	__typeof__(curl_easy_strerror) *easy_strerror;
	__typeof__(curl_easy_cleanup) *easy_cleanup;
	__typeof__(curl_slist_append) *slist_append;
	__typeof__(curl_slist_free_all) *slist_free_all;
};

static void *curl_load(struct curl_functions *f, char *error, size_t error_len)
{
	const struct shared_lib_symbol symbols[] = {
	    {"curl_global_init", (void **)&f->global_init},
	    {"curl_global_cleanup", (void **)&f->global_cleanup},
	    {"curl_easy_init", (void **)&f->easy_init},
	    {"curl_easy_setopt", (void **)&f->easy_setopt},
	    {"curl_easy_perform", (void **)&f->easy_perform},
	    {"curl_easy_getinfo", (void **)&f->easy_getinfo},
	    {"curl_easy_strerror", (void **)&f->easy_strerror},
	    {"curl_easy_cleanup", (void **)&f->easy_cleanup},
	    {"curl_slist_append", (void **)&f->slist_append},
	    {"curl_slist_free_all", (void **)&f->slist_free_all},
	};

	return shared_lib_open(MOTE_CURL_SONAME, symbols, sizeof(symbols) / sizeof(symbols[0]),
			       error, error_len);
}

static size_t api_client_collect(char *data, size_t size, size_t count, void *opaque)
{
	struct api_client_reply *reply = opaque;
	size_t n = size * count;
	size_t len = reply->body ? strlen(reply->body) : 0;

	if (len + n > API_CLIENT_REPLY_MAX || memchr(data, '\0', n))
		return 0; /* curl then fails the transfer with CURLE_WRITE_ERROR */
	char *grown = realloc(reply->body, len + n + 1);
	if (!grown)
		return 0;
	memcpy(grown + len, data, n);
	grown[len + n] = '\0';
	reply->body = grown;
	return n;
}

static void api_client_find_fault(struct api_client_reply *reply)
{
	cJSON *json = reply->body ? cJSON_Parse(reply->body) : NULL;
	const cJSON *fault = cJSON_GetObjectItemCaseSensitive(json, "fault_message");

	if (cJSON_IsString(fault))
		snprintf(reply->fault, sizeof(reply->fault), "%s", fault->valuestring);
	cJSON_Delete(json);
}

/* One exchange with libcurl loaded (f). */
static int api_client_exchange(const struct curl_functions *f, const char *socket_path,
			       const char *method, const char *path, const char *body,
			       struct api_client_reply *reply, char *error, size_t error_len)
{
	struct curl_slist *headers = NULL;
	char url[512];
	int ret = 0;

	CURL *curl = f->easy_init();
	if (!curl) {
		snprintf(error, error_len, "cannot start an HTTP client (libcurl)");
		return -ENOMEM;
	}
	/* The host name is a placeholder: the connection is the Unix socket's. */
	snprintf(url, sizeof(url), "http://localhost%s", path);
	headers = f->slist_append(headers, "Content-Type: application/json");
	headers = f->slist_append(headers, "Accept: application/json");
	/* No "Expect: 100-continue" round trip for a small body. */
	headers = f->slist_append(headers, "Expect:");
	f->easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path);
	f->easy_setopt(curl, CURLOPT_URL, url);
	f->easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	f->easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	f->easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	f->easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, API_CLIENT_CONNECT_TIMEOUT_S);
	f->easy_setopt(curl, CURLOPT_WRITEFUNCTION, api_client_collect);
	f->easy_setopt(curl, CURLOPT_WRITEDATA, reply);
	if (body) {
		f->easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		f->easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	CURLcode result = f->easy_perform(curl);
	if (result == CURLE_OK) {
		f->easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
		api_client_find_fault(reply);
	} else {
		ret = result == CURLE_COULDNT_CONNECT ? -ECONNREFUSED
		      : result == CURLE_OUT_OF_MEMORY ? -ENOMEM
						      : -EIO;
		snprintf(error, error_len, "%s: %s", socket_path, f->easy_strerror(result));
		api_client_reply_free(reply);
	}
	f->slist_free_all(headers);
	f->easy_cleanup(curl);
	return ret;
}

int api_client_request(const char *socket_path, const char *method, const char *path,
		       const char *body, struct api_client_reply *reply, char *error,
		       size_t error_len)
{
	struct curl_functions f;

	memset(reply, 0, sizeof(*reply));
	void *lib = curl_load(&f, error, error_len);
	if (!lib)
		return -ENOSYS;
	int ret = -ENOMEM;
	if (f.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(error, error_len, "cannot start an HTTP client (libcurl)");
	} else {
		ret = api_client_exchange(&f, socket_path, method, path, body, reply, error,
					  error_len);
		f.global_cleanup();
	}
	shared_lib_close(lib);
	return ret;
}

void api_client_reply_free(struct api_client_reply *reply)
{
	free(reply->body);
	reply->body = NULL;
}
