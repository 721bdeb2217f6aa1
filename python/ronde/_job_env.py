"""What a driver that hosts a job's rendezvous (ronde.spark, ronde.ray) hands each rank.

The same variables `ronde run` sets (src/launcher/worker_env.cc): identity, the store's
address and the job secret. ronde's runtime reads them at hvd.init().
"""

import secrets
import socket


def make_secret():
    """32 random bytes as hex, like the launcher's: the store and the data plane check it."""
    return secrets.token_hex(32)


def placements(hosts):
    """Per rank (list index) of `hosts`: dict of rank, size, local and cross rank and size.

    Ranks on one host are numbered in rank order; a host's cross rank is its position among
    the hosts in order of their first rank, the launcher's convention.
    """
    order = []
    for host in hosts:
        if host not in order:
            order.append(host)
    seen = {}
    result = []
    for rank, host in enumerate(hosts):
        local_rank = seen.get(host, 0)
        seen[host] = local_rank + 1
        result.append({"rank": rank, "host": host, "local_rank": local_rank})
    local_sizes = {host: hosts.count(host) for host in order}
    for entry in result:
        entry["size"] = len(hosts)
        entry["local_size"] = local_sizes[entry["host"]]
        # Horovod's cross communicator: the ranks with the same local rank, one per host.
        peers = [h for h in order if local_sizes[h] > entry["local_rank"]]
        entry["cross_rank"] = peers.index(entry["host"])
        entry["cross_size"] = len(peers)
    return result


def worker_env(placement, store_address, secret, extra=None):
    """The environment variables of one rank (`placement` from placements())."""
    env = {}
    for name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
        value = str(placement[name])
        env["RONDE_" + name.upper()] = value
        env["HOROVOD_" + name.upper()] = value  # Horovod scripts read their own names
    env["RONDE_HOSTNAME"] = placement["host"]
    env["RONDE_STORE_ADDRESS"] = store_address
    env["RONDE_SECRET"] = secret
    env.update(extra or {})
    return env


def reachable_address(host):
    """An IPv4 address of `host` (a name or an address), for other machines to connect to."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host
