import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Map;

import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.json.JsonConverter;

import io.apicurio.registry.utils.converter.AvroConverter;

/**
 * Decodes walbox's Avro records as a Kafka Connect sink would: with
 * Apicurio Registry's AvroConverter (toConnectData), against the registry
 * walbox registered the schemas in. The test e2e/debezium_avro_test.go runs
 * it (java WalboxAvroDecode.java REGISTRY_URL, the classpath of pom.xml
 * beside it): each stdin line is "topic hex-of-the-record-value", each
 * stdout line the Connect value as JSON (Connect's JsonConverter without
 * schemas), or "ERROR message".
 */
public class WalboxAvroDecode {
    public static void main(String[] args) throws Exception {
        String registryURL = args[0];
        // docs/schema-registry.md shows the code from here ...
        AvroConverter<Object> converter = new AvroConverter<>();
        converter.configure(Map.of(
                // Apicurio's own API, e.g. http://registry:8080/apis/registry/v2
                "apicurio.registry.url", registryURL,
                // walbox writes Confluent's wire format: magic byte 0, then
                // the 4-byte id the Confluent API answered (a content id)
                "apicurio.registry.as-confluent", "true",
                "apicurio.registry.use-id", "contentId",
                "apicurio.registry.headers.enabled", "false"),
                false); // false: the converter is for record values
        // ... to here, and then, for each record:
        //     SchemaAndValue sv = converter.toConnectData(record.topic(), record.value());

        JsonConverter json = new JsonConverter();
        json.configure(Map.of("schemas.enable", "false", "converter.type", "value"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            String[] parts = line.split(" ", 2);
            try {
                SchemaAndValue sv = converter.toConnectData(parts[0], HexFormat.of().parseHex(parts[1]));
                System.out.println(new String(json.fromConnectData(parts[0], sv.schema(), sv.value()), StandardCharsets.UTF_8));
            } catch (Exception e) {
                System.out.println("ERROR " + String.valueOf(e).replace('\n', ' '));
            }
            System.out.flush();
        }
    }
}
