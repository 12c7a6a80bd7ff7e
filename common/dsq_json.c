/* dsq_json.c - type-checked reads of json-c objects (see dsq_json.h). */
#include "dsq_json.h"

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
