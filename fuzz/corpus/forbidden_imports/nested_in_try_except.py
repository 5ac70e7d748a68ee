try:
    import math
except ImportError:
    pass
else:
    pass
finally:
    import multiprocessing
