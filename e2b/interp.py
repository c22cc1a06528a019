# The E2B code interpreter's kernel in a sandfs guest, one process per
# context (package e2b, interp.go): one JSON request a line on stdin,
# {"code", "env_vars"}; the answer, one JSON object a line on stdout, as
# the SDK reads /execute: stdout and stderr as they are written, the
# value of a final expression as the main result, an error with its
# traceback, then number_of_executions and end_of_execution.
import ast
import json
import os
import sys
import traceback

_proto = sys.stdout


def emit(obj):
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


class Stream:
    def __init__(self, kind):
        self.kind = kind

    def write(self, text):
        if text:
            emit({"type": self.kind, "text": str(text)})
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
scope = {"__name__": "__main__"}
count = 0
for line in iter(sys.stdin.readline, ""):
    try:
        req = json.loads(line)
    except ValueError:
        continue
    count += 1
    saved = dict(os.environ)
    os.environ.update({str(k): str(v) for k, v in (req.get("env_vars") or {}).items()})
    try:
        tree = ast.parse(req.get("code", ""), "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), scope)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), scope)
            if value is not None:
                emit({"type": "result", "is_main_result": True, "text": repr(value)})
    except BaseException as e:
        emit({"type": "error", "name": type(e).__name__, "value": str(e),
              "traceback": traceback.format_exc()})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    emit({"type": "number_of_executions", "execution_count": count})
    emit({"type": "end_of_execution"})
