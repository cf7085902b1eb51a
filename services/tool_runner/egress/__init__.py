"""The egress proxy in the tool runner (:mod:`.calls`): one per replica, a pass per call that runs
programs or fetches, its decisions on the bus. The proxy itself is :mod:`jidocode.shared.egress`."""
