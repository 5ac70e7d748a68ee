from importlib import import_module as im; im('socket')
