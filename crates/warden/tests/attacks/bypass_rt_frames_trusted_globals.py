# From a callback, walk the traceback's frames into json's decoder and its globals to sys.


# prelude: attempt (prelude/attempt.py, put here by the runner)

import json
found = []
def hook(d):
    try:
        raise ValueError
    except ValueError as e:
        frame = e.__traceback__.tb_frame.f_back
    found.append(frame.f_globals["re"].enum.sys)
    return d
json.loads("{}", object_hook=hook)
attempt(found[0])
print("ATTEMPTED")
