# Allocates and touches memory until something stops it.
x = []
while True:
    x.append(bytearray(16 << 20))
    if len(x) * 16 > 4096:
        print("BROKEN: allocated 4 GiB")
        break
