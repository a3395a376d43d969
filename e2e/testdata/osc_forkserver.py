"""A fork server for the openstack CLI, for peer suites that run it often.

python-ironicclient's functional tests run `openstack baremetal ...` some
500 times; each run spends most of its time importing the CLI and its
plugins. This server imports them once, then forks a child per run, which
takes the caller's stdin, stdout, stderr, working directory, environment
and arguments and runs the unchanged `openstack` entry point
(openstackclient.shell.main). The client (`client` below, installed as the
suite's `openstack`) hands its descriptors over the socket and exits with
the child's exit status.

Usage: osc_forkserver.py serve SOCKET        (until killed)
       osc_forkserver.py client SOCKET ARG...
"""

import array
import json
import os
import signal
import socket
import sys
import traceback


def serve(path):
    from openstackclient import shell
    # Warm up: import the CLI, its plugins and the baremetal commands.
    shell.OpenStackShell()
    import cliff.formatters.json_format  # noqa: F401
    import cliff.formatters.table  # noqa: F401
    import cliff.formatters.value  # noqa: F401
    import ironicclient.osc.plugin  # noqa: F401
    import ironicclient.osc.v1.baremetal_allocation  # noqa: F401
    import ironicclient.osc.v1.baremetal_chassis  # noqa: F401
    import ironicclient.osc.v1.baremetal_deploy_template  # noqa: F401
    import ironicclient.osc.v1.baremetal_driver  # noqa: F401
    import ironicclient.osc.v1.baremetal_node  # noqa: F401
    import ironicclient.osc.v1.baremetal_port  # noqa: F401
    import ironicclient.osc.v1.baremetal_portgroup  # noqa: F401
    import ironicclient.v1.client  # noqa: F401
    import keystoneauth1.loading  # noqa: F401
    import openstack.config  # noqa: F401

    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped
    print('ready', flush=True)
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            run(conn, shell)
        conn.close()


def recv_request(conn):
    fds = array.array('i')
    data = b''
    while not data.endswith(b'\n'):
        msg, anc, _, _ = conn.recvmsg(1 << 20, socket.CMSG_LEN(3 * fds.itemsize))
        if not msg:
            break
        data += msg
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(cdata[:len(cdata) - (len(cdata) % fds.itemsize)])
    return json.loads(data), list(fds)


def run(conn, shell):
    code = 1
    try:
        req, fds = recv_request(conn)
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(req['cwd'])
        os.environ.clear()
        os.environ.update(req['env'])
        sys.argv = ['openstack'] + req['args']
        try:
            code = shell.main(req['args'])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        try:
            conn.sendall(json.dumps({'code': code or 0}).encode() + b'\n')
        finally:
            os._exit(0)


def client(path, args):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    req = json.dumps({'args': args, 'cwd': os.getcwd(), 'env': dict(os.environ)}).encode() + b'\n'
    conn.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [0, 1, 2]))])
    data = b''
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    if not data:
        sys.exit(1)
    sys.exit(json.loads(data)['code'])


if __name__ == '__main__':
    if sys.argv[1] == 'serve':
        serve(sys.argv[2])
    else:
        client(sys.argv[2], sys.argv[3:])
