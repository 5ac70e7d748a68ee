# level=1 resolves `path` against the __package__ in the given globals: os.path. The package is
# only known at run time, so strict mode refuses it.
p = __import__("path", {"__package__": "os"}, None, [], 1)
