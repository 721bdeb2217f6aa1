"""The IPv4 address of a named network interface (the `nics` of ronde.spark.run)."""

import fcntl
import socket
import struct

SIOCGIFADDR = 0x8915


def address_of_interface(name):
    """The interface's IPv4 address, or None when it has none (or does not exist)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), SIOCGIFADDR,
                                 struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])
