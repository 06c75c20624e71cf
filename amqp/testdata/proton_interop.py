# Interop check with Apache Qpid Proton (Debian python3-qpid-proton):
# send three messages to q1 and receive them back, SASL PLAIN.
import sys
from proton import Message
from proton.utils import BlockingConnection

url = sys.argv[1]
conn = BlockingConnection(url, user="RootManageSharedAccessKey", password="secret-key",
                          allowed_mechs="PLAIN", timeout=10)
snd = conn.create_sender("q1")
for i in range(3):
    snd.send(Message(body="proton-%d" % i, properties={"i": i}, subject="s"))
rcv = conn.create_receiver("q1", credit=10)
got = []
for _ in range(3):
    m = rcv.receive(timeout=10)
    got.append((m.body, m.properties.get("i"), m.annotations.get("x-opt-sequence-number")))
    rcv.accept()
conn.close()
print(got)
assert [g[0] for g in got] == ["proton-0", "proton-1", "proton-2"], got
assert all(g[2] is not None for g in got), got
print("OK")
