#!/usr/bin/env bash
# The machine's RabbitMQ for `make demo`, `make test` and CI: installs Debian's rabbitmq-server when no broker
# is missing, and (`start`) starts it detached when nothing answers on 127.0.0.1:5672.
#   tools/broker.sh install   the package only: the tests start throwaway brokers from it (one when none runs, one
#                             with the stream plugin when the running broker lacks it)
#   tools/broker.sh start     the package, then the machine's broker unless one answers (the demo and CI use it)
# Nothing happens when SAFEBUNNY_TEST_AMQP_URI / SAFEBUNNY_DEMO_URI name another broker.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-install}"
answers() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

[ -n "${SAFEBUNNY_TEST_AMQP_URI:-}${SAFEBUNNY_DEMO_URI:-}" ] && exit 0
tools/apt_install.sh /usr/lib/rabbitmq/bin/rabbitmq-server=rabbitmq-server
if [ "$what" = start ] && ! answers; then
  echo "broker: nothing answers on 127.0.0.1:5672, starting rabbitmq-server -detached"
  rabbitmq-server -detached || true
  for _ in $(seq 1 90); do answers && break; sleep 1; done
  rabbitmqctl await_startup >/dev/null 2>&1 || true
  answers || { echo "broker: rabbitmq-server did not answer within 90 s (see /var/log/rabbitmq)" >&2; exit 1; }
fi
