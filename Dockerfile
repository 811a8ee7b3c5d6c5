# One image for every Magnetar service; the command picks the service:
#   magnetar-broker | magnetar-coordinator | magnetar-registry |
#   magnetar-admin-service (the admin REST service) | magnetar-migrate
# (`magnetar-admin` is the CLI, also installed.)  Build: docker build -t magnetar .

FROM python:3.11-slim AS build
WORKDIR /src
COPY libs/ libs/
COPY services/ services/
# Wheels for the workspace packages and every dependency, so the final stage installs
# offline and carries no build tools.
RUN pip wheel --no-cache-dir --wheel-dir /wheels \
      ./libs/protocol ./libs/storage ./libs/runtime ./libs/client \
      ./services/broker ./services/coordinator ./services/registry ./services/admin

FROM python:3.11-slim
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin magnetar
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels \
      magnetar-broker magnetar-coordinator magnetar-registry magnetar-admin-service magnetar \
    && rm -rf /wheels
USER 10001:10001
ENV PYTHONUNBUFFERED=1 \
    MAGNETAR_HOST=0.0.0.0 \
    MAGNETAR_PORT=8080 \
    MAGNETAR_LOG_FORMAT=json
EXPOSE 8080
CMD ["magnetar-broker"]
