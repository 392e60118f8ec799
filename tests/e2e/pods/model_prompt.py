"""What the scripted model (tests/kagent-runtime/model.py, in its pod) was sent for one turn.

    python3 model_prompt.py LOG SKIP TEXT

Looks at the requests LOG holds after its first SKIP lines and prints the messages of the first
one whose last user message is TEXT, one a line as "role: text" (whitespace collapsed). Exits 1
when no such request was logged. With TEXT "-", prints how many requests LOG holds.
"""

import json
import sys


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def main(log, skip, text):
    try:
        lines = open(log, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        lines = []
    if text == "-":
        print(len(lines))
        return
    for line in lines[int(skip):]:
        messages = json.loads(line)["messages"]
        said = [" ".join(text_of(m.get("content")).split()) for m in messages]
        users = [s for m, s in zip(messages, said) if m.get("role") == "user"]
        if users and users[-1] == " ".join(text.split()):
            for m, s in zip(messages, said):
                print(f"{m.get('role')}: {s}")
            return
    sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
