# Imports through importlib under an alias and from a built name, then writes the root.
import importlib as il
from importlib import import_module as load
shutil = il.import_module('shu' + 'til')
os = load('o' + 's')
try:
    shutil.copy('/etc/passwd', '/etc/passwd.pwned')
    print("BROKEN: wrote /etc")
except OSError as e:
    print("copy", e.strerror)
try:
    os.setuid(0)
    print("BROKEN: became root")
except OSError as e:
    print("setuid", e.strerror)
print("ATTEMPTED")
