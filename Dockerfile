# The image the Helm chart runs (deploy/helm/gpufleet, image.repository): gpufleet with the Kubernetes
# client, as the non-root user 10001 the chart's securityContext names. Build from the repository root:
#   docker build -t ghcr.io/gpufleet/gpufleet:0.1.0 .
# Not built in CI here (no container runtime on the build machine); the chart's tests start the same
# command line (`gpufleet up --config /etc/gpufleet/config.yaml`) from a virtual environment instead.
FROM python:3.11-slim
RUN groupadd --gid 10001 gpufleet && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/gpufleet gpufleet
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir '.[k8s]' && cd / && rm -rf /build
USER 10001:10001
WORKDIR /var/lib/gpufleet
ENTRYPOINT ["gpufleet"]
CMD ["up", "--config", "/etc/gpufleet/config.yaml"]
