# A single line of 100 MB without a newline, on stdout and then stderr.
head -c 100000000 /dev/zero | tr '\0' y
head -c 100000000 /dev/zero | tr '\0' z >&2
echo "BROKEN: all of it was written"
