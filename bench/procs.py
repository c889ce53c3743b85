"""What the benchmark scripts share about the processes they start: ending a run's whole process
group, and finding the /dev/shm files a run left behind. Python 3 standard library only."""

import os
import signal
import time


def kill_group(proc):
    """Ends the process group `proc` leads (started with start_new_session=True): SIGTERM, then
    SIGKILL if it is still there after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def shm_in_use():
    """The /dev/shm files some process has open or mapped."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        used.add(line[i + 9 :].split(" (deleted)")[0].strip())
        except OSError:
            pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    used.add(target[9:])
        except OSError:
            pass
    return used


def left_in_shm(before, started):
    """/dev/shm entries a run left: new since `before`, made after `started` (time.time()), and
    open or mapped by no process (other programs on the machine may make their own files
    meanwhile)."""
    new = []
    for name in sorted(shm_entries() - before):
        try:
            if os.stat(os.path.join("/dev/shm", name)).st_mtime >= started - 1:
                new.append(name)
        except FileNotFoundError:
            pass
    if not new:
        return []
    used = shm_in_use()
    return [name for name in new if name not in used]
