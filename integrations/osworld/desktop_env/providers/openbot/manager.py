"""OpenBotVMManager: OSWorld's VMManager for open-bot computers.

DesktopEnv asks it for a path_to_vm once (get_vm_path) and tells it about
reverts (delete_vm, add_vm, occupy_vm). Here a path is a computer id; the
worker is the registry of computers, and the capabilities are in this
process's memory (package registry), so the bookkeeping methods do nothing.
"""

import logging

from . import config, make_computer, Worker

try:
    from desktop_env.providers.base import VMManager
except ImportError:  # our own tests run without OSWorld
    VMManager = object

logger = logging.getLogger("desktopenv.providers.openbot.OpenBotVMManager")


class OpenBotVMManager(VMManager):
    """Makes one evaluation computer per get_vm_path call."""

    checked_and_cleaned = True

    def __init__(self, **kwargs):
        pass

    def initialize_registry(self, **kwargs):
        pass

    # DesktopEnv calls these after a revert that changed the path, with the
    # region positional: delete_vm(old, region), add_vm(new, region),
    # occupy_vm(new, pid, region).
    def add_vm(self, vm_path, region=None, **kwargs):
        pass

    def delete_vm(self, vm_path, region=None, **kwargs):
        pass

    def occupy_vm(self, vm_path, pid, region=None, **kwargs):
        pass

    def list_free_vms(self, **kwargs):
        return []

    def check_and_clean(self, **kwargs):
        pass

    def get_vm_path(self, os_type="Ubuntu", region=None, screen_size=(1920, 1080), **kwargs):
        """Creates an evaluation computer in a new session scope, adds the
        bot, and returns the computer's id."""
        if os_type and str(os_type).lower() != "ubuntu":
            raise NotImplementedError("open-bot computers are Linux (os_type Ubuntu), not %s" % os_type)
        cid = make_computer(Worker(config()), screen_size=tuple(screen_size) if screen_size else None)
        logger.info("open-bot: computer %s made", cid)
        return cid
