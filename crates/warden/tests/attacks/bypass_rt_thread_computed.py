# Import _thread by a computed name and import os in a new thread.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
th = imp("_th" + "read")
found = []
done = th.allocate_lock()
done.acquire()
def run():
    try:
        found.append(imp("o" + "s"))
    finally:
        done.release()
th.start_new_thread(run, ())
done.acquire()
attempt(found[0] if found else th)
print("ATTEMPTED")
