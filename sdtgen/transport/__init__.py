"""The transport: how closed packets leave a kernel and reach the host, under every target.

Read out of each CPU's ring in memory the host can see (``consumer``: the emulator's, QEMU's shared RAM),
or sent on a serial line as frames (``frames``) whose packets wait for their verdict (``packet_sink``);
``geometry`` sizes the rings' packets; ``shared_ram`` maps a QEMU guest's memory into the host. And onwards from
the host: ``relayd`` streams a session's packets to LTTng's relay daemon as they are read (``relayd_client``
its connection, ``relayd_wire`` its protocol's structs).
"""
