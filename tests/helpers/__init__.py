"""Code the test modules share: service control, daemons under test, binlog and relay builders,
fault proxies. Test modules import from here, never from each other."""
