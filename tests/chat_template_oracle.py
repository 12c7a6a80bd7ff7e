#!/usr/bin/python3
"""Renders conversations with Jinja2 as transformers' apply_chat_template(tokenize=False)
does: the oracle tests/test_chat_template.c compares dsq's chat prompts with.

Usage: chat_template_oracle.py CASES.json
CASES.json: {"template": PATH, "bos_token": S, "eos_token": S,
             "cases": [{"messages": [...], "add_generation_prompt": B, "kwargs": {...}}, ...]}
Prints a JSON list with one rendered string per case. Exit 77 when jinja2 is absent."""
import json
import sys

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("jinja2 absent (Debian: apt-get install python3-jinja2)\n")
    sys.exit(77)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    import datetime
    return datetime.datetime.now().strftime(fmt)


def main():
    spec = json.load(open(sys.argv[1], encoding="utf-8"))
    with open(spec["template"], encoding="utf-8", newline="") as f:
        text = f.read()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    tmpl = env.from_string(text)
    out = []
    for case in spec["cases"]:
        kw = {"bos_token": spec["bos_token"], "eos_token": spec["eos_token"]}
        kw.update(case.get("kwargs") or {})
        out.append(tmpl.render(messages=case["messages"], tools=None, documents=None,
                               add_generation_prompt=case["add_generation_prompt"], **kw))
    json.dump(out, sys.stdout, ensure_ascii=True)


main()
