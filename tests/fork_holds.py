"""Code for the fork tests' `python -c` scripts: a lock a fork waits for (as a bundle's is
while another thread reads it), held by a thread. `HOLDER` defines `locked()` (a new owner
of such a lock) and `hold(owner, seconds)` (a thread holds its lock for `seconds`, taken
before it returns); a script places it after what must be imported or registered first.
"""

HOLDER = """
import threading, time
from warmcli import forking

class Owner:
    pass

def locked():
    owner = Owner()
    owner._lock = forking.new_rlock(owner, held=True)  # as a bundle's: a fork waits for it
    return owner

def hold(owner, seconds):
    held = threading.Event()
    def run():
        with owner._lock:
            held.set()
            time.sleep(seconds)
    threading.Thread(target=run, daemon=True).start()
    held.wait()
"""
