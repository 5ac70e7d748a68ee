# Allocates and touches memory until something stops it (512 MiB is far past every profile of
# the suite, and little enough for its positive control).
x = []
while True:
    x.append(bytearray(16 << 20))
    if len(x) * 16 > 512:
        print("BROKEN: allocated 512 MiB")
        break
