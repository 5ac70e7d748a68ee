# One gibibyte on stdout, as fast as the pipe takes it.
head -c 1073741824 /dev/zero | tr '\0' x
echo
echo "BROKEN: all of it was written"
