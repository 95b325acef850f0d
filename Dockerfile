# cone: the CPU image both compose services run. The wheel is built in one stage and installed in the
# next, the same install path tests/test_install.py checks (the reference checkpoints are in the wheel).
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
# The CPU build of torch first, from PyTorch's CPU index: PyPI's default wheel pulls several GB of CUDA.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY --from=wheel /dist /dist
# psycopg: the driver of the pgvector store, which reaches the compose's Postgres (cone[pgvector] without its
# embedded server: the containers use the `postgres` service).
RUN pip install /dist/cone-*.whl "psycopg[binary]>=3.2" && rm -rf /dist
WORKDIR /var/lib/cone
EXPOSE 8000
CMD ["cone", "--help"]
