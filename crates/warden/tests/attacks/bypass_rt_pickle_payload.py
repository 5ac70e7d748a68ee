# Import pickle by a computed name and unpickle a payload that calls os.system (it reads
# /etc/shadow where that can be read).


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
pickle = imp("pic" + "kle")
status = pickle.loads(b"cos\nsystem\n(S'grep -q root: /etc/shadow'\ntR.")
if status == 0:
    print("BROKEN: read /etc/shadow through an unpickled os.system")
attempt(pickle)
print("ATTEMPTED")
