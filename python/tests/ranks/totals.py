"""What several rank scripts share: each rank publishes what its target received (row count and
key sum) and rank 0 adds them up."""


def publish_received(node, prefix, rows, key_sum):
    node.publish(f"{prefix}/{node.rank}", f"{rows} {key_sum}")


def total_received(node, prefix):
    """(rows, key sum) over every rank's target (rank 0; waits for each rank's record)."""
    count = total = 0
    for r in range(node.size):
        c, s = map(int, node.wait_for(f"{prefix}/{r}").split())
        count, total = count + c, total + s
    return count, total
