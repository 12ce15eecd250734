"""Names `vulture` reports as unused that stay, each with why (tests/test_dead_code.py runs it over the project).

Never imported or run: vulture reads this file and counts every name below as used. Whatever reads a name by a
string or from outside the project belongs here. A helper only the tests call stays only where it belongs beside the
data it reads (a catalog's query); others live in the tests (tests/promqltest.py).
GpuStack's state builders (`_<module>`, called by the name components/states/order.py gives each state) are not
listed: the test derives them from the state order itself.
"""

_ = object()

# --- read by pydantic, by name -----------------------------------------------------------------------------------------
_.model_config  # pydantic's model settings (components/config/base.py)
_.chart_repository  # the gone `nfd.chartRepository` key: declared so that its validator refuses it by name
_.nfd_chart  # `versions.nfdChart`: declared so that a stack pinning another NFD chart is refused by its validator
_.plugin_workload  # `validation.validator.pluginWorkload`: the validator reads it through the source map by name
_.delete_empty_dir_data  # `upgrade.drain.deleteEmptyDirData`: rendered through flag(drain, "delete_empty_dir_data")
# `operands.<operand>`: each operand's override is looked up by its key (ops.overrides.get(operand))
_.mps_control_daemon
_.kata_sandbox_device_plugin
_.peermem
_.vfio_manager_driver_manager
_.vgpu_manager_driver_manager

# --- called by a library, by protocol ------------------------------------------------------------------------------
_.make_urn  # pulumi.runtime.Mocks (gpustack/mockrun.py's monitor)
_.new_resource  # pulumi.runtime.Mocks
_.compose_sequence_node  # yaml's Composer, overridden to count nodes (node_images/inputfiles.py)
_.compose_mapping_node  # yaml's Composer
_.get_return_type  # kubernetes.watch.Watch, overridden for raw events (gpustack_agent/api/podwatch.py)
_.get_watch_argument_name  # kubernetes.watch.Watch
_._raw_return_type  # kubernetes.watch.Watch reads it
_._stop  # kubernetes.watch.Watch reads it
_._api_client  # kubernetes.watch.Watch reads it

# --- data a reader or a test reads whole ---------------------------------------------------------------------------------
_.framebuffer_gb  # a vGPU type name's parts (components/catalogs/vgpu_catalog.py VgpuType), as NVIDIA names them
_.series  # a vGPU type name's parts
_.operator_state  # each state's operator counterpart (components/states/order.py): the table documents the mapping
_.secret_paths  # a recorded registration's secret outputs: what the secret-leak tests read (gpustack/mockrun.py)
_.dra_service  # the DRA flavours' Services, a component's public children as its other Services are
_.controller  # the DRA driver's controller Deployment, a public child of DraDriver
# Completeness tables: each classifies every member of something, and a test fails when one is missing.
_.OVERRIDABLE_ENV  # the env a user may override, with why (tests/test_owned_env.py)
_.POOL_DRIVER_FIELDS  # what each PoolDriver field does to a driver (tests/test_driver_fields.py)
_.EXTERNAL_METRICS  # series other exporters provide, which alerts and panels may read (tests/test_monitoring_rules.py)
# Catalog queries beside the data they read, which the tests hold the catalog to.
_.parse_metrics_csv  # the inverse of dcgm_metrics.metrics_csv: the exporter's CSV read back
_.exported_metric_names  # which of the catalog's fields the exporter turns into series
_.substitute_grafana_variables  # the dashboard's variable syntax, beside the dashboard that uses it
_.vgpu_capable_models  # the catalog's GPU models the vGPU software knows
_.split_repository  # node image catalog: a private image's repository and name
_.placeholder_path  # the configuration page's row for a key path (gpustack/docs.py), as the page lists it
_.transitive_dependencies  # the recorded graph's closure (gpustack/render.py), beside effective_dependencies
