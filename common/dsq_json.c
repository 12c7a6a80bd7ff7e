/* dsq_json.c - type-checked reads of json-c objects, and the writers the
 * CLIs' --json output is built with (see dsq_json.h). */
#include "dsq_json.h"

#include <math.h>
#include <stdio.h>

static int get(json_object *obj, const char *key, json_type t, json_object **v)
{
    *v = NULL;
    if (!obj || !json_object_is_type(obj, json_type_object)) return DSQ_JSON_BADTYPE;
    if (!json_object_object_get_ex(obj, key, v)) return DSQ_JSON_ABSENT;
    /* A present null is a wrong type, not an absent key: "x": null is what
     * a hostile or broken writer produces, and it must not pass as default. */
    if (!json_object_is_type(*v, t)) { *v = NULL; return DSQ_JSON_BADTYPE; }
    return DSQ_JSON_OK;
}

int dsq_json_get_str(json_object *obj, const char *key, const char **out)
{
    json_object *v;
    int r = get(obj, key, json_type_string, &v);
    *out = r == DSQ_JSON_OK ? json_object_get_string(v) : NULL;
    return r;
}

int dsq_json_get_int(json_object *obj, const char *key, int64_t *out)
{
    json_object *v;
    int r = get(obj, key, json_type_int, &v);
    if (r == DSQ_JSON_OK) *out = json_object_get_int64(v);
    return r;
}

int dsq_json_get_num(json_object *obj, const char *key, double *out)
{
    json_object *v;
    int r = get(obj, key, json_type_int, &v);
    if (r == DSQ_JSON_BADTYPE && v == NULL && obj && json_object_is_type(obj, json_type_object))
        r = get(obj, key, json_type_double, &v);
    if (r == DSQ_JSON_OK) *out = json_object_get_double(v);
    return r;
}

int dsq_json_get_bool(json_object *obj, const char *key, int *out)
{
    json_object *v;
    int r = get(obj, key, json_type_boolean, &v);
    if (r == DSQ_JSON_OK) *out = json_object_get_boolean(v) ? 1 : 0;
    return r;
}

int dsq_json_get_obj(json_object *obj, const char *key, json_object **out)
{
    return get(obj, key, json_type_object, out);
}

json_object *dsq_json_num(double v, const char *fmt)
{
    if (!isfinite(v)) return json_object_new_null();
    char buf[64];
    snprintf(buf, sizeof buf, fmt, v);
    return json_object_new_double_s(v, buf);
}

json_object *dsq_json_double(double v)
{
    return isfinite(v) ? json_object_new_double(v) : json_object_new_null();
}

void dsq_json_put_str(json_object *o, const char *key, const char *v)
{
    json_object_object_add(o, key, v ? json_object_new_string(v) : json_object_new_null());
}

void dsq_json_put_int(json_object *o, const char *key, int64_t v)
{
    json_object_object_add(o, key, json_object_new_int64(v));
}

void dsq_json_put_u64(json_object *o, const char *key, uint64_t v)
{
    json_object_object_add(o, key, json_object_new_uint64(v));
}

void dsq_json_put_bool(json_object *o, const char *key, int v)
{
    json_object_object_add(o, key, json_object_new_boolean(v ? 1 : 0));
}

void dsq_json_put_num(json_object *o, const char *key, double v, const char *fmt)
{
    json_object_object_add(o, key, dsq_json_num(v, fmt));
}
