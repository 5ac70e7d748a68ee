# importlib is a module like any other and is not in the default allow-list, so the import of
# importlib itself is refused before its import_module is looked at.
import importlib as il; il.import_module('os')
