// Prints Apache Kafka's broker configuration catalogue as a Python module (stdout), for tidelog's
// src/tidelog/common/kafka_broker_catalogue.py. Run by tests/compat/kafka/broker_catalogue.sh with
// the jars install.sh fetched: every key of the broker's ConfigDef with its type, default, whether
// it is a password, and its dynamic update mode (read-only, per-broker, cluster-wide).
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.coordinator.group.GroupConfig;
import org.apache.kafka.server.config.AbstractKafkaConfig;
import org.apache.kafka.server.config.DynamicBrokerConfig;

public class BrokerConfigCatalogue {
    public static void main(String[] args) {
        Map<String, String> modes = DynamicBrokerConfig.dynamicConfigUpdateModes();
        Map<String, ConfigDef.ConfigKey> keys = new TreeMap<>(AbstractKafkaConfig.CONFIG_DEF.configKeys());
        StringBuilder out = new StringBuilder();
        out.append("\"\"\"Apache Kafka ").append(args.length > 0 ? args[0] : "").append("'s broker configuration keys, generated from its jars by\n");
        out.append("tests/compat/kafka/broker_catalogue.sh (do not edit): name -> (type, default as Kafka renders it or\n");
        out.append("None, update mode: read-only | per-broker | cluster-wide, password).\"\"\"\n\n");
        out.append("KAFKA_BROKER_KEYS: dict[str, tuple[str, str | None, str, bool]] = {\n");
        for (Map.Entry<String, ConfigDef.ConfigKey> e : keys.entrySet()) {
            ConfigDef.ConfigKey key = e.getValue();
            String mode = modes.getOrDefault(e.getKey(), "read-only");
            String rendered = null;
            if (key.hasDefault() && key.defaultValue != null) {
                rendered = ConfigDef.convertToString(key.defaultValue, key.type);
            }
            out.append("    ").append(py(e.getKey())).append(": (").append(py(key.type.name())).append(", ")
               .append(rendered == null ? "None" : py(rendered)).append(", ").append(py(mode)).append(", ")
               .append(key.type == ConfigDef.Type.PASSWORD ? "True" : "False").append("),\n");
        }
        out.append("}\n\n");
        out.append("# GROUP resource (type 32) keys: name -> (type, broker key giving the default or None, default as\n");
        out.append("# Kafka renders it or None).\n");
        out.append("KAFKA_GROUP_KEYS: dict[str, tuple[str, str | None, str | None]] = {\n");
        Map<String, ConfigDef.ConfigKey> groupKeys = new TreeMap<>(GroupConfig.CONFIG_DEF.configKeys());
        for (Map.Entry<String, ConfigDef.ConfigKey> e : groupKeys.entrySet()) {
            ConfigDef.ConfigKey key = e.getValue();
            String synonym = GroupConfig.brokerSynonym(e.getKey()).orElse(null);
            String rendered = key.hasDefault() && key.defaultValue != null ? ConfigDef.convertToString(key.defaultValue, key.type) : null;
            out.append("    ").append(py(e.getKey())).append(": (").append(py(key.type.name())).append(", ")
               .append(synonym == null ? "None" : py(synonym)).append(", ")
               .append(rendered == null ? "None" : py(rendered)).append("),\n");
        }
        out.append("}\n");
        System.out.print(out);
    }

    private static String py(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
