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

/* Writers for the CLIs' --json output: one place that builds JSON, so no
 * tool escapes strings by hand. Each adds key to the object o (a NULL
 * string or a non-finite number becomes null). Numbers keep the precision
 * fmt gives them (printf format of one double) instead of json-c's %.17g. */
void dsq_json_put_str(json_object *o, const char *key, const char *v);
void dsq_json_put_int(json_object *o, const char *key, int64_t v);
void dsq_json_put_u64(json_object *o, const char *key, uint64_t v);
void dsq_json_put_bool(json_object *o, const char *key, int v);
void dsq_json_put_num(json_object *o, const char *key, double v, const char *fmt);
/* v as a json number with fmt's precision (or null when not finite). */
json_object *dsq_json_num(double v, const char *fmt);
/* v as a json-c double, printed in the serialization format the printer
 * sets (json_c_set_serialization_double_format), or null when not finite. */
json_object *dsq_json_double(double v);

#endif
