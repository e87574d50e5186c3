"""Parses events with the CloudEvents SDK for Python (the `cloudevents` package on PyPI, a client we
did not write), as a consumer would: the tests hand it what a sink received and compare what it
read with what the relay published.

Reads a JSON array of strings on stdin, each one CloudEvent in structured mode (JSON event format),
parses each with `cloudevents.core.formats.json.JSONFormat` (which validates the required and
optional attributes and the extension names), and prints a JSON array of what it read: every
attribute (`time` as RFC 3339), the extensions, and `data`. Exits 1 naming the event it could not
parse.

Usage: python cloudevents_check.py < bodies.json
"""

import json
import sys

from cloudevents.core.formats.json import JSONFormat


def main():
    bodies = json.load(sys.stdin)
    out = []
    for index, body in enumerate(bodies):
        try:
            event = JSONFormat().read(None, body)
        except Exception as error:  # noqa: BLE001 - any refusal is the answer
            print(f"event {index} is not a CloudEvent the SDK accepts: {error}", file=sys.stderr)
            return 1
        attributes = dict(event.get_attributes())
        if attributes.get("time") is not None:
            attributes["time"] = attributes["time"].isoformat()
        out.append({"attributes": attributes, "data": event.get_data()})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
