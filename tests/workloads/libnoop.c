/* libnoop: a function that does nothing, called through the PLT. */
int noop(int x) { return x + 1; }
