/* The control API's client (api_client.h). */
#include "api_client.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reply larger than this is not one a mote sends. */
#define API_CLIENT_REPLY_MAX (1 << 20)
#define API_CLIENT_CONNECT_TIMEOUT_S 5L

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

int api_client_request(const char *socket_path, const char *method, const char *path,
		       const char *body, struct api_client_reply *reply, char *error,
		       size_t error_len)
{
	struct curl_slist *headers = NULL;
	char url[512];
	int ret = 0;

	memset(reply, 0, sizeof(*reply));
	CURL *curl = curl_easy_init();
	if (!curl) {
		snprintf(error, error_len, "cannot start an HTTP client (libcurl)");
		return -ENOMEM;
	}
	/* The host name is a placeholder: the connection is the Unix socket's. */
	snprintf(url, sizeof(url), "http://localhost%s", path);
	headers = curl_slist_append(headers, "Content-Type: application/json");
	headers = curl_slist_append(headers, "Accept: application/json");
	/* No "Expect: 100-continue" round trip for a small body. */
	headers = curl_slist_append(headers, "Expect:");
	curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, API_CLIENT_CONNECT_TIMEOUT_S);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, api_client_collect);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, reply);
	if (body) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	CURLcode result = curl_easy_perform(curl);
	if (result == CURLE_OK) {
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
		api_client_find_fault(reply);
	} else {
		ret = result == CURLE_COULDNT_CONNECT ? -ECONNREFUSED
		      : result == CURLE_OUT_OF_MEMORY ? -ENOMEM
						      : -EIO;
		snprintf(error, error_len, "%s: %s", socket_path, curl_easy_strerror(result));
		api_client_reply_free(reply);
	}
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	return ret;
}

void api_client_reply_free(struct api_client_reply *reply)
{
	free(reply->body);
	reply->body = NULL;
}
