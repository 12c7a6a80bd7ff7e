/* dsq_json.h - type-checked reads of json-c objects.
 *
 * JSON input is hostile: json_object_get_string(NULL-valued field) is NULL,
 * json_object_get_int("12x") is 0. These helpers tell "absent" from "present
 * with the wrong type", so callers can refuse the file instead of crashing
 * on strcmp(NULL) or silently using 0. */
#ifndef DSQ_JSON_H
#define DSQ_JSON_H

#include <json-c/json.h>
#include <stdint.h>

enum { DSQ_JSON_ABSENT = 0, DSQ_JSON_OK = 1, DSQ_JSON_BADTYPE = -1 };

/* obj[key] as a string: *out borrowed from obj (NULL unless DSQ_JSON_OK).
 * A non-object obj counts as DSQ_JSON_BADTYPE. */
int dsq_json_get_str(json_object *obj, const char *key, const char **out);
/* obj[key] as an integer (JSON int only, not double or string). */
int dsq_json_get_int(json_object *obj, const char *key, int64_t *out);
/* obj[key] as a number (int or double). */
int dsq_json_get_num(json_object *obj, const char *key, double *out);
/* obj[key] as a boolean (JSON true/false only). */
int dsq_json_get_bool(json_object *obj, const char *key, int *out);
/* obj[key] as an object. */
int dsq_json_get_obj(json_object *obj, const char *key, json_object **out);

#endif
